//! The public-item accuracies the decider models' cards publish (`README.md` of each model
//! folder on the Hugging Face Hub, "argmax over the exact label set"), shown beside a run of the
//! same model so a reader sees at once whether it reproduces them.

use super::items::TIERS;

/// One model's published figures.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ModelCard {
    /// The model and release, as its card names it.
    pub model: &'static str,
    /// The `model` names a server of this release reports (`"decider-" + decider_config.json's
    /// `version`).
    pub names: &'static [&'static str],
    /// Correct public items per tier, in [`TIERS`] order (easy, standard, hard), out of each
    /// tier's full item count.
    pub correct: [usize; 3],
}

/// The releases whose cards publish public-item accuracy.
pub const CARDS: &[ModelCard] = &[
    ModelCard { model: "decider-2b v10", names: &["decider-v10", "decider-2b-v10"], correct: [48, 61, 51] },
    ModelCard { model: "decider-2b v11", names: &["decider-v11", "decider-2b-v11"], correct: [48, 64, 64] },
    ModelCard { model: "decider-35b-a3b v1", names: &["decider-35b-a3b-v1", "decider-35b-a3b"], correct: [48, 70, 75] },
];

/// The card of the model a run reports, if it is a known release.
pub fn card_for(model: &str) -> Option<&'static ModelCard> {
    CARDS.iter().find(|card| card.names.contains(&model))
}

impl ModelCard {
    /// The published correct count of a tier (`easy`, `standard`, `hard`) and the tier's full
    /// item count it is out of (a run with `--limit` has fewer).
    pub fn correct_in(&self, tier: &str) -> Option<(usize, usize)> {
        let index = TIERS.iter().position(|t| t.name == tier)?;
        Some((self.correct[index], TIERS[index].count))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_known_release_is_found_by_the_name_its_server_reports() {
        assert_eq!(card_for("decider-2b-v10").map(|c| c.correct), Some([48, 61, 51]));
        assert_eq!(card_for("decider-35b-a3b-v1").and_then(|c| c.correct_in("hard")), Some((75, 111)));
        assert_eq!(card_for("decider-demo-random-weights"), None);
    }
}
