//! Metadata filters: must / should / must_not over equality and set membership.

use std::collections::BTreeMap;

use crate::error::{Error, Result};

/// A test on one metadata key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Condition {
    /// The key's value equals this string.
    Equals { key: String, value: String },
    /// The key's value is one of these strings.
    AnyOf { key: String, values: Vec<String> },
}

impl Condition {
    fn matches(&self, metadata: &BTreeMap<String, String>) -> bool {
        match self {
            Condition::Equals { key, value } => metadata.get(key) == Some(value),
            Condition::AnyOf { key, values } => metadata.get(key).is_some_and(|v| values.contains(v)),
        }
    }

    fn key(&self) -> &str {
        match self {
            Condition::Equals { key, .. } | Condition::AnyOf { key, .. } => key,
        }
    }
}

/// Matches when every `must` holds, at least one `should` holds (if any are given),
/// and no `must_not` holds. The empty filter matches everything.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Filter {
    pub must: Vec<Condition>,
    pub should: Vec<Condition>,
    pub must_not: Vec<Condition>,
}

impl Filter {
    /// Whether the filter has no condition.
    pub fn is_empty(&self) -> bool {
        self.must.is_empty() && self.should.is_empty() && self.must_not.is_empty()
    }

    /// Whether a document with `metadata` passes.
    pub fn matches(&self, metadata: &BTreeMap<String, String>) -> bool {
        self.must.iter().all(|c| c.matches(metadata))
            && (self.should.is_empty() || self.should.iter().any(|c| c.matches(metadata)))
            && !self.must_not.iter().any(|c| c.matches(metadata))
    }

    /// Rejects conditions that cannot mean anything, naming the one at fault
    /// (`field` is where the filter sits in the request, e.g. `filter`).
    pub fn validate(&self, field: &str) -> Result<()> {
        for (clause, conditions) in [("must", &self.must), ("should", &self.should), ("must_not", &self.must_not)] {
            for (index, condition) in conditions.iter().enumerate() {
                let at = format!("{field}.{clause}[{index}]");
                if condition.key().is_empty() {
                    return Err(Error::invalid(format!("{at}.key"), "must not be empty"));
                }
                if let Condition::AnyOf { values, .. } = condition
                    && values.is_empty()
                {
                    return Err(Error::invalid(format!("{at}.any_of"), "must list at least one value"));
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn metadata(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    fn equals(key: &str, value: &str) -> Condition {
        Condition::Equals { key: key.into(), value: value.into() }
    }

    #[test]
    fn combines_must_should_and_must_not() {
        let filter = Filter {
            must: vec![equals("lang", "en")],
            should: vec![equals("team", "a"), Condition::AnyOf { key: "team".into(), values: vec!["b".into()] }],
            must_not: vec![equals("draft", "yes")],
        };
        assert!(filter.matches(&metadata(&[("lang", "en"), ("team", "b")])));
        assert!(!filter.matches(&metadata(&[("lang", "en"), ("team", "c")])));
        assert!(!filter.matches(&metadata(&[("lang", "de"), ("team", "a")])));
        assert!(!filter.matches(&metadata(&[("lang", "en"), ("team", "a"), ("draft", "yes")])));
        assert!(Filter::default().matches(&metadata(&[])));
    }

    #[test]
    fn validation_names_the_condition() {
        let filter =
            Filter { should: vec![Condition::AnyOf { key: "k".into(), values: vec![] }], ..Default::default() };
        let error = filter.validate("filter").unwrap_err().to_string();
        assert!(error.starts_with("filter.should[0].any_of:"), "{error}");
    }
}
