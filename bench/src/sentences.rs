//! Distinct 12-word English sentences, made without randomness so every run (and every machine) embeds the same texts.
//!
//! Each sentence fills one template from seven word lists. Three of them have pairwise coprime lengths (16, 17, 19) and
//! sentence `i` takes word `i mod len` from each, so by the Chinese remainder theorem the first 16 x 17 x 19 = 5168
//! sentences all differ. The other lists only add variety.

/// 16 adjectives, 17 subjects and 19 verbs: the coprime lengths.
const SUBJECT_ADJECTIVES: [&str; 16] = [
    "quiet", "young", "careful", "tired", "clever", "patient", "busy", "curious", "honest", "brave", "gentle", "eager",
    "calm", "proud", "polite", "nervous",
];
const SUBJECTS: [&str; 17] = [
    "teacher", "farmer", "engineer", "doctor", "student", "painter", "driver", "baker", "writer", "nurse", "pilot",
    "gardener", "lawyer", "musician", "chef", "sailor", "tailor",
];
const VERBS: [&str; 19] = [
    "reads", "writes", "carries", "paints", "checks", "finds", "cleans", "opens", "fixes", "sells", "buys", "moves",
    "packs", "signs", "counts", "sorts", "builds", "draws", "wraps",
];
const OBJECT_ADJECTIVES: [&str; 13] = [
    "old", "small", "heavy", "bright", "broken", "wooden", "green", "empty", "long", "simple", "strange", "famous",
    "cheap",
];
const OBJECTS: [&str; 11] =
    ["letter", "basket", "map", "chair", "window", "report", "bicycle", "lamp", "book", "fence", "box"];
const PLACES: [&str; 9] = ["river", "station", "market", "bridge", "library", "harbor", "garden", "school", "church"];
const TIMES: [&str; 7] = ["morning", "evening", "afternoon", "night", "weekend", "summer", "winter"];

/// The `i`-th sentence, "The <adj> <subject> <verb> the <adj> <object> near the <place> every <time>.": twelve
/// words, one to two tokens each for BERT.
pub fn sentence(i: usize) -> String {
    format!(
        "The {} {} {} the {} {} near the {} every {}.",
        SUBJECT_ADJECTIVES[i % SUBJECT_ADJECTIVES.len()],
        SUBJECTS[i % SUBJECTS.len()],
        VERBS[i % VERBS.len()],
        // Strides keep neighbouring sentences from sharing their tails.
        OBJECT_ADJECTIVES[(i * 5 + 3) % OBJECT_ADJECTIVES.len()],
        OBJECTS[(i * 3 + 1) % OBJECTS.len()],
        PLACES[(i * 2 + 5) % PLACES.len()],
        TIMES[(i * 4 + 2) % TIMES.len()],
    )
}

/// The first `count` sentences, all different for `count` up to 5168.
pub fn sentences(count: usize) -> Vec<String> {
    (0..count).map(sentence).collect()
}
