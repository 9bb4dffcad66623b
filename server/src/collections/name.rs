//! Collection names: what a request may call a collection.
//!
//! One rule for every store, so a collection can move between them: 1 to 48
//! lower-case ASCII letters, digits and underscores, starting with a letter. It fits
//! a directory name, a PostgreSQL schema name (lower-case identifiers need no
//! quoting) and, with its first letter upper-cased, a Weaviate class name.

use crate::error::{Error, Result};

/// The longest name: room for a store's prefix and suffixes within PostgreSQL's 63
/// bytes of identifier.
pub const MAX_NAME_CHARS: usize = 48;

/// The default collection's name where a name is needed (key scopes, HTTP paths); in
/// requests it may also be left empty. No named collection may take it.
pub const DEFAULT: &str = embedwire_gateway_http::access::DEFAULT_COLLECTION;

/// Checks the name of a collection to create or delete: a well-formed name that is
/// not [`DEFAULT`].
pub fn validate_new(name: &str, field: &str) -> Result<()> {
    validate(name, field)?;
    if name == DEFAULT {
        return Err(Error::invalid(
            field,
            format!("{DEFAULT:?} names the default collection, which cannot be created or deleted"),
        ));
    }
    Ok(())
}

/// Checks a collection name; `field` names the request field in the error.
pub fn validate(name: &str, field: &str) -> Result<()> {
    let well_formed = name.len() <= MAX_NAME_CHARS
        && name.starts_with(|c: char| c.is_ascii_lowercase())
        && name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
    if well_formed {
        Ok(())
    } else {
        Err(Error::invalid(
            field,
            format!(
                "{name:?} is not a collection name: 1 to {MAX_NAME_CHARS} lower-case letters, digits and \
                 underscores, starting with a letter"
            ),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_lower_case_words_of_bounded_length() {
        for good in ["a", "tenant_42", "docs", &"x".repeat(MAX_NAME_CHARS)] {
            assert!(validate(good, "name").is_ok(), "{good}");
        }
        for bad in ["", "1abc", "_a", "Docs", "a-b", "a b", "a/../b", "é", &"x".repeat(MAX_NAME_CHARS + 1)] {
            let error = validate(bad, "name").unwrap_err().to_string();
            assert!(error.starts_with("name: "), "{bad}: {error}");
        }
    }
}
