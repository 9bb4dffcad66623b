// weaviate-refill marks every vector index of a stopped Weaviate node for a refill of
// its queue at the next start, without Weaviate's repair endpoint.
//
// scripts/cluster.sh throws a restarted node's HNSW graphs away (it says why) and must
// then queue every stored vector again. Weaviate 1.35's /debug/index/repair/vector does
// queue them, but ends by deleting from the graph every vector whose object it did not
// visit, and it visits only the objects that existed when it began (RepairIndex in
// adapters/repos/db/shard_async.go): a write indexed while it runs is tombstoned, and
// searches that node answers miss the document. Weaviate's own start-up path has no such
// pass: a shard with an index checkpoint (the legacy queue's marker, kept in the node's
// index.db, a bbolt file) gets every stored vector from that document id on queued
// (ConvertQueue -> FillQueue), skipping those its graph contains, and deletes nothing.
// This writes checkpoint 0 for every vector index found on disk under the data
// directory (run it before the graphs are thrown away), so that the node's first start
// after it queues every vector it stores.
//
// Usage: weaviate-refill DATA_DIR   (the node must be stopped: bbolt locks the file)
// Prints the number of vector indexes marked: the node logs "enqueued vectors from LSM
// store" once for each when it has queued them.
package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	bolt "go.etcd.io/bbolt"
)

// As Weaviate's indexcheckpoint package names them.
const (
	checkpointFile   = "index.db"
	checkpointBucket = "checkpoint"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: weaviate-refill DATA_DIR")
		os.Exit(2)
	}
	marked, err := markIndexes(os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, "weaviate-refill:", err)
		os.Exit(1)
	}
	fmt.Println(marked)
}

// checkpointKeys names the checkpoint of every DATA_DIR/<index>/<shard>/<vector>.hnsw.commitlog.d
// as Weaviate's indexcheckpoint package does: the shard's id (Shard.ID(): the index
// directory, i.e. the lower-cased class name, "_" and the shard name), then "_" and the
// target vector for a named vector, whose files are called "vectors_<name>" (Shard.vectorIndexID;
// the legacy unnamed vector's are called "main").
func checkpointKeys(dataDir string) ([]string, error) {
	graphDirs, err := filepath.Glob(filepath.Join(dataDir, "*", "*", "*.hnsw.commitlog.d"))
	if err != nil {
		return nil, err
	}
	keys := make([]string, 0, len(graphDirs))
	for _, graph := range graphDirs {
		shardDir := filepath.Dir(graph)
		key := filepath.Base(filepath.Dir(shardDir)) + "_" + filepath.Base(shardDir)
		files := strings.TrimSuffix(filepath.Base(graph), ".hnsw.commitlog.d")
		if named, ok := strings.CutPrefix(files, "vectors_"); ok {
			key += "_" + named
		}
		keys = append(keys, key)
	}
	return keys, nil
}

func markIndexes(dataDir string) (int, error) {
	keys, err := checkpointKeys(dataDir)
	if err != nil || len(keys) == 0 {
		return 0, err
	}
	db, err := bolt.Open(filepath.Join(dataDir, checkpointFile), 0o600, &bolt.Options{Timeout: 5 * time.Second})
	if err != nil {
		return 0, fmt.Errorf("open %s (is the node stopped?): %w", checkpointFile, err)
	}
	defer db.Close()
	zero := make([]byte, 8) // document id 0, as the little-endian uint64 Weaviate reads
	err = db.Update(func(tx *bolt.Tx) error {
		bucket, err := tx.CreateBucketIfNotExists([]byte(checkpointBucket))
		if err != nil {
			return err
		}
		for _, key := range keys {
			if err := bucket.Put([]byte(key), zero); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	return len(keys), nil
}
