// Embeds one text with an embedwire server and prints the dimension of its vector:
// the smallest complete Node client, on @grpc/grpc-js with code that ts-proto
// generated from proto/.
//
// Usage: node dist/src/main.js HOST:PORT [TEXT]
import { Metadata, credentials } from "@grpc/grpc-js";

import { EmbedRequest, EmbedResponse, EmbedServiceClient, EmbeddingDtype } from "../gen/embedwire/v1/embed";

function embed(client: EmbedServiceClient, request: EmbedRequest): Promise<EmbedResponse> {
  const deadline = new Date(Date.now() + 30_000);
  return new Promise((resolve, reject) => {
    client.embed(request, new Metadata(), { deadline }, (error, response) => (error ? reject(error) : resolve(response)));
  });
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
    console.log(vector.length);
  } finally {
    client.close();
  }
}

main().catch((error: unknown) => {
  console.error("embed:", error instanceof Error ? error.message : error);
  process.exit(1);
});
