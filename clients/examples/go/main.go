// Command embed embeds one text with an embedwire server and prints the dimension of
// its vector, then reranks three short texts against a query and prints the best one:
// the smallest complete Go client, from code generated off proto/.
//
// Output (stdout), one labelled line per call:
//
//	go: 384
//	go rerank: best=1 scorer=bi-encoder:sentence-transformers/all-MiniLM-L6-v2
//
// Usage: go run . HOST:PORT [TEXT]
package main

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	embedwirev1 "embedwire/examples/go/gen/embedwire/v1"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: embed HOST:PORT [TEXT]")
		os.Exit(2)
	}
	text := "hello from Go"
	if len(os.Args) > 2 {
		text = os.Args[2]
	}
	if err := run(os.Args[1], text); err != nil {
		fmt.Fprintln(os.Stderr, "embed:", err)
		os.Exit(1)
	}
}

func run(address, text string) error {
	conn, err := grpc.NewClient(address, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	response, err := embedwirev1.NewEmbedServiceClient(conn).Embed(ctx, &embedwirev1.EmbedRequest{
		Inputs: []string{text},
		Dtype:  embedwirev1.EmbeddingDtype_EMBEDDING_DTYPE_FLOAT32,
	})
	if err != nil {
		return err
	}
	// Vectors arrive as little-endian float32 bytes, row-major: no parsing, one read
	// per value.
	if got, want := len(response.GetEmbeddings()), int(response.GetCount()*response.GetDim())*4; got != want {
		return fmt.Errorf("%d bytes for %d x %d float32 values", got, response.GetCount(), response.GetDim())
	}
	vector := make([]float32, response.GetDim())
	for i := range vector {
		vector[i] = math.Float32frombits(binary.LittleEndian.Uint32(response.GetEmbeddings()[4*i:]))
	}
	fmt.Fprintf(os.Stderr, "model %s, first values %v\n", response.GetModel(), vector[:3])
	fmt.Printf("go: %d\n", len(vector))

	return rerank(ctx, embedwirev1.NewRerankServiceClient(conn))
}

// rerankQuery and rerankTexts make a rerank whose answer is obvious: only texts[1] is
// about the query.
const rerankQuery = "How do I bake bread at home?"

var rerankTexts = []string{
	"The stock market fell sharply on Tuesday.",
	"Knead the dough, let it rise, then bake the loaf for 30 minutes.",
	"Cats sleep for most of the day.",
}

// rerank orders rerankTexts by relevance to rerankQuery and prints the index of the
// best one and what scored them (a cross-encoder, or the embedding model's cosine).
func rerank(ctx context.Context, client embedwirev1.RerankServiceClient) error {
	response, err := client.Rerank(ctx, &embedwirev1.RerankRequest{
		Query: rerankQuery,
		Texts: rerankTexts,
	})
	if err != nil {
		return fmt.Errorf("rerank: %w", err)
	}
	ranks := response.GetRanks() // best first
	if len(ranks) != len(rerankTexts) {
		return fmt.Errorf("rerank: %d ranks for %d texts", len(ranks), len(rerankTexts))
	}
	for _, rank := range ranks {
		if int(rank.GetIndex()) >= len(rerankTexts) {
			return fmt.Errorf("rerank: index %d out of %d texts", rank.GetIndex(), len(rerankTexts))
		}
		fmt.Fprintf(os.Stderr, "rerank %d %.4f %q\n", rank.GetIndex(), rank.GetScore(), rerankTexts[rank.GetIndex()])
	}
	fmt.Printf("go rerank: best=%d scorer=%s\n", ranks[0].GetIndex(), response.GetScorer())
	return nil
}
