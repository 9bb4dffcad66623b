//! Conversions between the corpus' records and Weaviate's wire types: object ids,
//! properties, and metadata filters.
//!
//! Metadata (arbitrary string keys and values) is stored twice on chunks and
//! documents: as JSON (`metadata_json`, returned with hits) and as the `meta` text
//! array of `["key","value"]` JSON pairs with `field` tokenization, which filters test
//! exactly: `equals` and `any_of` become ContainsAny, `must_not` ContainsNone.

use std::collections::BTreeMap;

use embedwire_proto::weaviate::v1 as pb;
use pb::filters::Operator;
use prost_types::value::Kind;

use crate::config::Consistency;
use crate::corpus::filter::{Condition, Filter};
use crate::error::{Error, Result};

/// Namespace of every object id embedwire writes (UUID v5 of a name in it), so the
/// same (document, chunk) always lands on the same object: rewrites are idempotent.
const ID_NAMESPACE: uuid::Uuid = uuid::uuid!("4c1f3a8e-3a5b-5d1e-9a7e-6d2b8f0c9e11");

/// Most values one filter may test: Weaviate evaluates each against its inverted index.
pub const MAX_FILTER_VALUES: usize = 1024;

/// The object id of a document's chunk.
pub fn chunk_uuid(document_id: &str, chunk_index: u32) -> String {
    uuid::Uuid::new_v5(&ID_NAMESPACE, format!("chunk\0{document_id}\0{chunk_index}").as_bytes()).to_string()
}

/// The object id of a document's record.
pub fn document_uuid(document_id: &str) -> String {
    uuid::Uuid::new_v5(&ID_NAMESPACE, format!("document\0{document_id}").as_bytes()).to_string()
}

/// The object id of a document waiting in a job.
pub fn pending_uuid(job_id: &str, sequence: u64) -> String {
    uuid::Uuid::new_v5(&ID_NAMESPACE, format!("pending\0{job_id}\0{sequence}").as_bytes()).to_string()
}

/// The object id of a named collection's registry entry.
pub fn collection_uuid(name: &str) -> String {
    uuid::Uuid::new_v5(&ID_NAMESPACE, format!("collection\0{name}").as_bytes()).to_string()
}

/// The object id of one part of a job ("header" or "progress").
pub fn job_uuid(job_id: &str, part: &str) -> String {
    uuid::Uuid::new_v5(&ID_NAMESPACE, format!("job\0{job_id}\0{part}").as_bytes()).to_string()
}

/// A consistency level as Weaviate's REST API and its messages spell it.
pub fn level_name(level: Consistency) -> &'static str {
    match level {
        Consistency::One => "ONE",
        Consistency::Quorum => "QUORUM",
        Consistency::All => "ALL",
    }
}

/// One `meta` entry: a key and a value as a JSON pair.
pub fn meta_pair(key: &str, value: &str) -> String {
    serde_json::to_string(&[key, value]).expect("strings serialize")
}

/// The `meta` array of a document's metadata.
pub fn meta_pairs(metadata: &BTreeMap<String, String>) -> Vec<String> {
    metadata.iter().map(|(k, v)| meta_pair(k, v)).collect()
}

/// Builds the properties of one object.
#[derive(Default)]
pub struct PropertiesBuilder {
    fields: BTreeMap<String, prost_types::Value>,
    text_arrays: Vec<pb::TextArrayProperties>,
    empty_lists: Vec<String>,
}

impl PropertiesBuilder {
    pub fn text(mut self, name: &str, value: impl Into<String>) -> Self {
        self.fields.insert(name.into(), prost_types::Value { kind: Some(Kind::StringValue(value.into())) });
        self
    }

    pub fn number(mut self, name: &str, value: f64) -> Self {
        self.fields.insert(name.into(), prost_types::Value { kind: Some(Kind::NumberValue(value)) });
        self
    }

    pub fn boolean(mut self, name: &str, value: bool) -> Self {
        self.fields.insert(name.into(), prost_types::Value { kind: Some(Kind::BoolValue(value)) });
        self
    }

    pub fn texts(mut self, name: &str, values: Vec<String>) -> Self {
        if values.is_empty() {
            self.empty_lists.push(name.into());
        } else {
            self.text_arrays.push(pb::TextArrayProperties { values, prop_name: name.into() });
        }
        self
    }

    pub fn build(self) -> pb::batch_object::Properties {
        pb::batch_object::Properties {
            non_ref_properties: Some(prost_types::Struct { fields: self.fields.into_iter().collect() }),
            text_array_properties: self.text_arrays,
            empty_list_props: self.empty_lists,
            ..Default::default()
        }
    }
}

/// Reads properties of a search result.
pub struct PropertiesReader<'a>(Option<&'a pb::Properties>);

impl<'a> PropertiesReader<'a> {
    pub fn of(result: &'a pb::SearchResult) -> Self {
        PropertiesReader(result.properties.as_ref().and_then(|p| p.non_ref_props.as_ref()))
    }

    fn value(&self, name: &str) -> Option<&'a pb::value::Kind> {
        self.0?.fields.get(name)?.kind.as_ref()
    }

    pub fn text(&self, name: &str) -> String {
        match self.value(name) {
            Some(pb::value::Kind::TextValue(text)) => text.clone(),
            _ => String::new(),
        }
    }

    pub fn number(&self, name: &str) -> f64 {
        match self.value(name) {
            Some(pb::value::Kind::NumberValue(value)) => *value,
            Some(pb::value::Kind::IntValue(value)) => *value as f64,
            _ => 0.0,
        }
    }

    pub fn boolean(&self, name: &str) -> bool {
        matches!(self.value(name), Some(pb::value::Kind::BoolValue(true)))
    }
}

/// The id of a search result.
pub fn result_uuid(result: &pb::SearchResult) -> String {
    result.metadata.as_ref().map(|m| m.id.clone()).unwrap_or_default()
}

/// The vector of a search result (asked for with `metadata.vector`).
pub fn result_vector(result: &pb::SearchResult) -> Option<Vec<f32>> {
    let metadata = result.metadata.as_ref()?;
    let bytes = if !metadata.vector_bytes.is_empty() {
        &metadata.vector_bytes
    } else {
        &metadata.vectors.first()?.vector_bytes
    };
    Some(embedwire_proto::vectors::f32_from_le_bytes(bytes))
}

fn on(property: &str) -> Option<pb::FilterTarget> {
    Some(pb::FilterTarget { target: Some(pb::filter_target::Target::Property(property.into())) })
}

/// `property` equals a text.
pub fn text_equals(property: &str, value: &str) -> pb::Filters {
    pb::Filters {
        operator: Operator::Equal as i32,
        test_value: Some(pb::filters::TestValue::ValueText(value.into())),
        target: on(property),
        ..Default::default()
    }
}

/// `property` differs from a text.
pub fn text_not_equals(property: &str, value: &str) -> pb::Filters {
    pb::Filters { operator: Operator::NotEqual as i32, ..text_equals(property, value) }
}

/// `property` (text or text array) contains any of `values`.
pub fn text_any(property: &str, values: Vec<String>) -> pb::Filters {
    text_set(Operator::ContainsAny, property, values)
}

fn text_set(operator: Operator, property: &str, values: Vec<String>) -> pb::Filters {
    pb::Filters {
        operator: operator as i32,
        test_value: Some(pb::filters::TestValue::ValueTextArray(pb::TextArray { values })),
        target: on(property),
        ..Default::default()
    }
}

/// A number `property` compared with `value`.
pub fn number_compare(operator: Operator, property: &str, value: f64) -> pb::Filters {
    pb::Filters {
        operator: operator as i32,
        test_value: Some(pb::filters::TestValue::ValueNumber(value)),
        target: on(property),
        ..Default::default()
    }
}

/// A boolean `property` equals `value`.
pub fn boolean_equals(property: &str, value: bool) -> pb::Filters {
    pb::Filters {
        operator: Operator::Equal as i32,
        test_value: Some(pb::filters::TestValue::ValueBoolean(value)),
        target: on(property),
        ..Default::default()
    }
}

/// All of `parts` (None for none).
pub fn all_of(mut parts: Vec<pb::Filters>) -> Option<pb::Filters> {
    match parts.len() {
        0 => None,
        1 => parts.pop(),
        _ => Some(pb::Filters { operator: Operator::And as i32, filters: parts, ..Default::default() }),
    }
}

/// Any of `parts` (None for none).
pub fn any_of(mut parts: Vec<pb::Filters>) -> Option<pb::Filters> {
    match parts.len() {
        0 => None,
        1 => parts.pop(),
        _ => Some(pb::Filters { operator: Operator::Or as i32, filters: parts, ..Default::default() }),
    }
}

/// The `meta` pairs a condition accepts.
fn condition_pairs(condition: &Condition) -> Vec<String> {
    match condition {
        Condition::Equals { key, value } => vec![meta_pair(key, value)],
        Condition::AnyOf { key, values } => values.iter().map(|v| meta_pair(key, v)).collect(),
    }
}

/// The Weaviate filter that selects the same documents as `filter` (None: all), or
/// INVALID_ARGUMENT naming the part it cannot express (`field` is where the filter sits
/// in the request). Never a filter that means something else.
pub fn metadata_filter(filter: &Filter, field: &str) -> Result<Option<pb::Filters>> {
    let values: usize = [&filter.must, &filter.should, &filter.must_not]
        .iter()
        .flat_map(|conditions| conditions.iter())
        .map(|c| condition_pairs(c).len())
        .sum();
    if values > MAX_FILTER_VALUES {
        return Err(Error::invalid(
            field,
            format!("tests {values} values; the weaviate store takes at most {MAX_FILTER_VALUES} per filter"),
        ));
    }
    let must = filter.must.iter().map(|c| text_any("meta", condition_pairs(c)));
    let should = any_of(filter.should.iter().map(|c| text_any("meta", condition_pairs(c))).collect());
    let must_not = filter.must_not.iter().map(|c| text_set(Operator::ContainsNone, "meta", condition_pairs(c)));
    Ok(all_of(must.chain(should).chain(must_not).collect()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_stable_and_distinct() {
        assert_eq!(chunk_uuid("a", 0), chunk_uuid("a", 0));
        assert_ne!(chunk_uuid("a", 0), chunk_uuid("a", 1));
        assert_ne!(chunk_uuid("a\01", 0), chunk_uuid("a", 10));
        assert_ne!(document_uuid("a"), chunk_uuid("a", 0));
    }

    #[test]
    fn meta_pairs_keep_separators_and_spaces() {
        assert_eq!(meta_pair("k=1", " v "), r#"["k=1"," v "]"#);
        assert_ne!(meta_pair("a", "b=c"), meta_pair("a=b", "c"));
    }

    #[test]
    fn filter_translation_covers_every_clause() {
        let filter = Filter {
            must: vec![Condition::Equals { key: "lang".into(), value: "en".into() }],
            should: vec![
                Condition::Equals { key: "team".into(), value: "a".into() },
                Condition::AnyOf { key: "team".into(), values: vec!["b".into(), "c".into()] },
            ],
            must_not: vec![Condition::Equals { key: "draft".into(), value: "yes".into() }],
        };
        let translated = metadata_filter(&filter, "filter").unwrap().unwrap();
        assert_eq!(translated.operator, Operator::And as i32);
        assert_eq!(translated.filters.len(), 3);
        assert_eq!(translated.filters[1].operator, Operator::Or as i32);
        assert_eq!(translated.filters[2].operator, Operator::ContainsNone as i32);
        assert!(metadata_filter(&Filter::default(), "filter").unwrap().is_none());
    }

    #[test]
    fn oversized_filters_are_refused_by_name() {
        let values = (0..=MAX_FILTER_VALUES).map(|i| i.to_string()).collect();
        let filter = Filter { must: vec![Condition::AnyOf { key: "k".into(), values }], ..Default::default() };
        let error = metadata_filter(&filter, "filter").unwrap_err().to_string();
        assert!(error.starts_with("filter: tests"), "{error}");
    }
}
