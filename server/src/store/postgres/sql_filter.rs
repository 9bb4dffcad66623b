//! Metadata filters as SQL. Keys and values are always bound parameters, never
//! written into the statement: a key like `a'); DROP TABLE x; --` or `{a,b}` is
//! only ever compared as the text it is. `->>` with a text operand reads one
//! top-level key literally (unlike `#>>`, it does not parse paths).

use tokio_postgres::types::ToSql;

use crate::corpus::filter::{Condition, Filter};

/// One bound value of a filter.
#[derive(Debug, Clone, PartialEq)]
pub enum Param {
    Text(String),
    Texts(Vec<String>),
}

impl Param {
    pub fn as_sql(&self) -> &(dyn ToSql + Sync) {
        match self {
            Param::Text(text) => text,
            Param::Texts(texts) => texts,
        }
    }
}

/// A WHERE condition over a `metadata jsonb` column and the values it binds.
#[derive(Debug, Clone, PartialEq)]
pub struct SqlFilter {
    /// `TRUE` for the empty filter.
    pub condition: String,
    pub params: Vec<Param>,
}

/// Translates `filter`; its parameters are numbered from `$first`.
pub fn translate(filter: &Filter, first: usize) -> SqlFilter {
    let mut params = Vec::new();
    let mut test = |condition: &Condition| {
        // A missing key compares as NULL: coalesce makes that plainly false, so that
        // NOT (must_not) of it is true, as in the embedded store.
        let (key, value) = match condition {
            Condition::Equals { key, value } => (key, Param::Text(value.clone())),
            Condition::AnyOf { key, values } => (key, Param::Texts(values.clone())),
        };
        let operator = if matches!(value, Param::Text(_)) { "= $" } else { "= ANY($" };
        let close = if matches!(value, Param::Text(_)) { "" } else { ")" };
        params.push(Param::Text(key.clone()));
        params.push(value);
        let n = first + params.len() - 2;
        format!("coalesce((metadata ->> ${n}) {operator}{}{close}, false)", n + 1)
    };
    let mut parts: Vec<String> = filter.must.iter().map(&mut test).collect();
    if !filter.should.is_empty() {
        let any: Vec<String> = filter.should.iter().map(&mut test).collect();
        parts.push(format!("({})", any.join(" OR ")));
    }
    parts.extend(filter.must_not.iter().map(|c| format!("NOT {}", test(c))));
    let condition = if parts.is_empty() { "TRUE".to_string() } else { parts.join(" AND ") };
    SqlFilter { condition, params }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_key_and_value_is_a_parameter() {
        let hostile = "a'); DROP TABLE chunks; --";
        let filter = Filter {
            must: vec![Condition::Equals { key: hostile.into(), value: "x'y".into() }],
            should: vec![
                Condition::AnyOf { key: "{a,b}".into(), values: vec!["1".into(), ";".into()] },
                Condition::Equals { key: "$.k".into(), value: "v".into() },
            ],
            must_not: vec![Condition::Equals { key: "draft".into(), value: "yes".into() }],
        };
        let sql = translate(&filter, 3);
        assert_eq!(
            sql.condition,
            "coalesce((metadata ->> $3) = $4, false) AND (coalesce((metadata ->> $5) = ANY($6), false) OR \
             coalesce((metadata ->> $7) = $8, false)) AND NOT coalesce((metadata ->> $9) = $10, false)"
        );
        assert!(!sql.condition.contains(hostile) && !sql.condition.contains("x'y"));
        assert_eq!(sql.params[0], Param::Text(hostile.into()));
        assert_eq!(sql.params[3], Param::Texts(vec!["1".into(), ";".into()]));
        assert_eq!(sql.params.len(), 8);
    }

    #[test]
    fn the_empty_filter_matches_everything() {
        assert_eq!(translate(&Filter::default(), 1), SqlFilter { condition: "TRUE".into(), params: vec![] });
    }
}
