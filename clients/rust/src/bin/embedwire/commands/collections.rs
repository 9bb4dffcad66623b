//! `embedwire collections list|create|delete`.

use embedwire_client::{Client, Collection, CollectionIndex, CollectionSettings};
use serde_json::{Value, json};

use crate::cli::{CollectionsCommand, IndexArg};
use crate::commands::print_json;

fn collection_json(collection: &Collection) -> Value {
    json!({
        "name": collection.name,
        "chunk_tokens": collection.chunk_tokens,
        "chunk_overlap_tokens": collection.chunk_overlap_tokens,
        "index": index_name(collection.index),
        "keyword_index": collection.keyword_index,
        "created_at": collection.created_at,
    })
}

fn index_name(index: CollectionIndex) -> &'static str {
    match index {
        CollectionIndex::Exact => "exact",
        CollectionIndex::Hnsw => "hnsw",
    }
}

fn collection_line(collection: &Collection) -> String {
    format!(
        "{}: chunks of {} tokens ({} overlapping), {} index, keyword index {}",
        collection.name,
        collection.chunk_tokens,
        collection.chunk_overlap_tokens,
        index_name(collection.index),
        if collection.keyword_index { "on" } else { "off" }
    )
}

pub async fn run(client: &Client, command: CollectionsCommand, json_output: bool) -> anyhow::Result<()> {
    match command {
        CollectionsCommand::List => {
            let collections = client.list_collections().await?;
            if json_output {
                return print_json(&Value::Array(collections.iter().map(collection_json).collect()));
            }
            for collection in &collections {
                println!("{}", collection_line(collection));
            }
        }
        CollectionsCommand::Create(args) => {
            let settings = CollectionSettings {
                chunk_tokens: args.chunk_tokens,
                chunk_overlap_tokens: args.chunk_overlap_tokens,
                index: args.index.map(|index| match index {
                    IndexArg::Exact => CollectionIndex::Exact,
                    IndexArg::Hnsw => CollectionIndex::Hnsw,
                }),
                keyword_index: args.keyword_index,
            };
            let collection = client.create_collection(&args.name, settings).await?;
            if json_output {
                return print_json(&collection_json(&collection));
            }
            println!("created {}", collection_line(&collection));
        }
        CollectionsCommand::Delete { name } => {
            let documents = client.delete_collection(&name).await?;
            if json_output {
                return print_json(&json!({"name": name, "deleted_documents": documents}));
            }
            println!("deleted {name} and its {documents} documents");
        }
    }
    Ok(())
}
