//! `embedwire info`: the served model and the server's limits.

use embedwire_client::Client;
use serde_json::json;

use crate::commands::print_json;

pub async fn run(client: &Client, json_output: bool) -> anyhow::Result<()> {
    let info = client.info().await?;
    let limits = &info.limits;
    if json_output {
        return print_json(&json!({
            "model": info.model,
            "dim": info.dim,
            "max_input_tokens": info.max_input_tokens,
            "pooling": info.pooling,
            "backend": info.backend,
            "dtypes": info.dtypes,
            "version": info.version,
            "rerank_scorer": info.rerank_scorer,
            "limits": {
                "max_inputs_per_request": limits.max_inputs_per_request,
                "max_request_bytes": limits.max_request_bytes,
                "max_in_flight_inputs": limits.max_in_flight_inputs,
                "max_batch_size": limits.max_batch_size,
                "max_batch_tokens": limits.max_batch_tokens,
                "max_input_chars": limits.max_input_chars,
                "max_rerank_texts": limits.max_rerank_texts,
            },
        }));
    }
    println!("model:                  {}", info.model);
    println!("dim:                    {}", info.dim);
    println!("max input tokens:       {}", info.max_input_tokens);
    println!("pooling:                {}", info.pooling);
    println!("backend:                {}", info.backend);
    println!("dtypes:                 {}", info.dtypes.join(", "));
    println!("server version:         {}", info.version);
    println!("rerank scorer:          {}", info.rerank_scorer);
    println!("max inputs per request: {}", limits.max_inputs_per_request);
    println!("max request bytes:      {}", limits.max_request_bytes);
    println!("max in-flight inputs:   {}", limits.max_in_flight_inputs);
    println!("max batch size:         {}", limits.max_batch_size);
    println!("max batch tokens:       {}", limits.max_batch_tokens);
    println!("max input chars:        {}", limits.max_input_chars);
    println!("max rerank texts:       {}", limits.max_rerank_texts);
    Ok(())
}
