//! Hits grouped by document: a document ranks by its best chunk and keeps its best
//! few, so a page shows each document once (what BEIR's evaluation and a person
//! reading results both count).

use std::collections::HashMap;

/// The most chunks one document may bring to a grouped result.
pub const MAX_GROUP_SIZE: usize = 100;

/// The chunks a grouped search ranks at most, however deep the documents it needs
/// lie: Weaviate answers at most 10,000 objects a query (its QUERY_MAXIMUM_RESULTS).
pub const MAX_GROUPED_CANDIDATES: usize = 10_000;

/// How many chunks a grouped search asks for first, to find `documents` documents
/// of `group_size` chunks each: a document has a few chunks (2.3 on average in
/// SciFact), so three times as many chunks usually hold enough documents, and a
/// shortfall asks again for four times more.
pub fn first_candidates(documents: usize, group_size: usize) -> usize {
    (documents * group_size * 3).clamp(1, MAX_GROUPED_CANDIDATES)
}

/// The next, larger request after `candidates` chunks held too few documents.
pub fn more_candidates(candidates: usize) -> Option<usize> {
    (candidates < MAX_GROUPED_CANDIDATES).then(|| (candidates * 4).min(MAX_GROUPED_CANDIDATES))
}

/// Groups `ranked` (best first) by document, in the order of each document's best
/// item, keeping each document's first `group_size` items in their order.
pub fn group_by_document<T>(ranked: Vec<T>, document_of: impl Fn(&T) -> &str, group_size: usize) -> Vec<Vec<T>> {
    let mut groups: Vec<Vec<T>> = Vec::new();
    let mut position: HashMap<String, usize> = HashMap::new();
    for item in ranked {
        let at = match position.get(document_of(&item)) {
            Some(&at) => at,
            None => {
                position.insert(document_of(&item).to_string(), groups.len());
                groups.push(Vec::with_capacity(group_size));
                groups.len() - 1
            }
        };
        if groups[at].len() < group_size {
            groups[at].push(item);
        }
    }
    groups
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn documents_rank_by_their_best_item_and_keep_their_best_few() {
        let ranked = vec![("b", 9), ("a", 8), ("b", 7), ("c", 6), ("b", 5), ("a", 4)];
        let groups = group_by_document(ranked.clone(), |item| item.0, 2);
        assert_eq!(groups, vec![vec![("b", 9), ("b", 7)], vec![("a", 8), ("a", 4)], vec![("c", 6)]]);
        let one_each = group_by_document(ranked, |item| item.0, 1);
        assert_eq!(one_each, vec![vec![("b", 9)], vec![("a", 8)], vec![("c", 6)]]);
    }

    #[test]
    fn candidates_grow_to_the_cap_and_stop_there() {
        assert_eq!(first_candidates(10, 1), 30);
        assert_eq!(first_candidates(10_000, 100), MAX_GROUPED_CANDIDATES);
        assert_eq!(more_candidates(30), Some(120));
        assert_eq!(more_candidates(9_000), Some(MAX_GROUPED_CANDIDATES));
        assert_eq!(more_candidates(MAX_GROUPED_CANDIDATES), None);
    }
}
