//! Idle GPUs lent to users in debt (`[lending]`): a run of a GPU job whose payer was in debt when it
//! started is *borrowed*. It is requeued (never cancelled) as soon as a user in credit waits for
//! its GPU type, and then charged nothing; one that finishes unreclaimed is charged as usual, or at
//! the site's discount.

use std::fmt;

/// How a borrowed run is charged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Lent {
    /// Requeued for the waiting jobs `waiting`: charged nothing.
    Reclaimed { waiting: String },
    /// Ran to its end (or was ended by its owner or Slurm): its price less `discount_percent`.
    Finished { discount_percent: u8 },
}

impl Lent {
    /// The share of its price the run pays, in permille.
    pub fn permille(&self) -> u32 {
        match self {
            Lent::Reclaimed { .. } => 0,
            Lent::Finished { discount_percent } => 1000 - 10 * u32::from((*discount_percent).min(100)),
        }
    }
}

impl fmt::Display for Lent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Lent::Reclaimed { waiting } => {
                write!(f, "a borrowed run of idle GPUs, reclaimed for job {waiting}: not charged")
            }
            Lent::Finished { discount_percent: 0 } => f.write_str("a borrowed run of idle GPUs, not reclaimed"),
            Lent::Finished { discount_percent } => {
                write!(f, "a borrowed run of idle GPUs, not reclaimed: {discount_percent}% off")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reclaimed_run_pays_nothing_and_a_finished_one_its_price_less_the_discount() {
        assert_eq!(Lent::Reclaimed { waiting: "12".into() }.permille(), 0);
        assert_eq!(Lent::Finished { discount_percent: 0 }.permille(), 1000);
        assert_eq!(Lent::Finished { discount_percent: 25 }.permille(), 750);
        assert_eq!(Lent::Finished { discount_percent: 200 }.permille(), 0, "never below nothing");
        assert_eq!(
            Lent::Reclaimed { waiting: "12,13".into() }.to_string(),
            "a borrowed run of idle GPUs, reclaimed for job 12,13: not charged"
        );
        assert_eq!(
            Lent::Finished { discount_percent: 25 }.to_string(),
            "a borrowed run of idle GPUs, not reclaimed: 25% off"
        );
    }
}
