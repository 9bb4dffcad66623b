// Embeds one text with an embedwire server and prints the dimension of its vector,
// then reranks three short texts against a query and prints the best one: the
// smallest complete Node client, on @grpc/grpc-js with code that ts-proto generated
// from proto/.
//
// Output (stdout), one labelled line per call:
//   node: 384
//   node rerank: best=1 scorer=bi-encoder:sentence-transformers/all-MiniLM-L6-v2
//
// Usage: node dist/src/main.js HOST:PORT [TEXT]
import { Metadata, credentials } from "@grpc/grpc-js";

import { EmbedRequest, EmbedResponse, EmbedServiceClient, EmbeddingDtype } from "../gen/embedwire/v1/embed";
import { RerankRequest, RerankResponse, RerankServiceClient } from "../gen/embedwire/v1/rerank";

// A rerank whose answer is obvious: only RERANK_TEXTS[1] is about the query.
const RERANK_QUERY = "How do I bake bread at home?";
const RERANK_TEXTS = [
  "The stock market fell sharply on Tuesday.",
  "Knead the dough, let it rise, then bake the loaf for 30 minutes.",
  "Cats sleep for most of the day.",
];

function embed(client: EmbedServiceClient, request: EmbedRequest): Promise<EmbedResponse> {
  const deadline = new Date(Date.now() + 30_000);
  return new Promise((resolve, reject) => {
    client.embed(request, new Metadata(), { deadline }, (error, response) => (error ? reject(error) : resolve(response)));
  });
}

function rerank(client: RerankServiceClient, request: RerankRequest): Promise<RerankResponse> {
  const deadline = new Date(Date.now() + 30_000);
  return new Promise((resolve, reject) => {
    client.rerank(request, new Metadata(), { deadline }, (error, response) => (error ? reject(error) : resolve(response)));
  });
}

// Orders RERANK_TEXTS by relevance to RERANK_QUERY and prints the index of the best one
// and what scored them (a cross-encoder, or the embedding model's cosine).
async function rerankExample(address: string): Promise<void> {
  const client = new RerankServiceClient(address, credentials.createInsecure());
  try {
    const response = await rerank(client, RerankRequest.fromPartial({ query: RERANK_QUERY, texts: RERANK_TEXTS }));
    const ranks = response.ranks; // best first
    if (ranks.length !== RERANK_TEXTS.length) {
      throw new Error(`rerank: ${ranks.length} ranks for ${RERANK_TEXTS.length} texts`);
    }
    for (const rank of ranks) {
      if (rank.index >= RERANK_TEXTS.length) {
        throw new Error(`rerank: index ${rank.index} out of ${RERANK_TEXTS.length} texts`);
      }
      console.error(`rerank ${rank.index} ${rank.score.toFixed(4)} ${JSON.stringify(RERANK_TEXTS[rank.index])}`);
    }
    console.log(`node rerank: best=${ranks[0].index} scorer=${response.scorer}`);
  } finally {
    client.close();
  }
}

async function main(): Promise<void> {
  const [address, text = "hello from Node"] = process.argv.slice(2);
  if (!address) {
    console.error("usage: main.js HOST:PORT [TEXT]");
    process.exit(2);
  }
  const client = new EmbedServiceClient(address, credentials.createInsecure());
  try {
    const response = await embed(
      client,
      EmbedRequest.fromPartial({ inputs: [text], dtype: EmbeddingDtype.EMBEDDING_DTYPE_FLOAT32 }),
    );
    // Vectors arrive as little-endian float32 bytes, row-major. The bytes may sit at
    // any offset of their buffer, so read through a DataView rather than a
    // Float32Array (which needs 4-byte alignment).
    const bytes = response.embeddings;
    if (bytes.byteLength !== response.count * response.dim * 4) {
      throw new Error(`${bytes.byteLength} bytes for ${response.count} x ${response.dim} float32 values`);
    }
    const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
    const vector = Array.from({ length: response.dim }, (_, i) => view.getFloat32(4 * i, true));
    console.error(`model ${response.model}, first values ${vector.slice(0, 3).join(", ")}`);
    console.log(`node: ${vector.length}`);
  } finally {
    client.close();
  }
  await rerankExample(address);
}

main().catch((error: unknown) => {
  console.error("embed:", error instanceof Error ? error.message : error);
  process.exit(1);
});
