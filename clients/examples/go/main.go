// Command embed embeds one text with an embedwire server and prints the dimension of
// its vector: the smallest complete Go client, from code generated off proto/.
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
	fmt.Println(len(vector))
	return nil
}
