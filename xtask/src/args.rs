//! What the commands' clap options share: numbers within bounds, and the one leftover form of
//! the hand-written parsers they replaced.

use std::{
    fmt::Display,
    ops::{Bound, RangeBounds},
    str::FromStr,
};

/// A clap value parser for a number within `range`, whose error says the bounds
/// (`must be at least 1`, `must be between 3 and 600`).
pub fn number_in<T, R>(range: R) -> impl Fn(&str) -> Result<T, String> + Clone + Send + Sync + 'static
where
    T: FromStr + PartialOrd + Display + Clone + Send + Sync + 'static,
    T::Err: Display,
    R: RangeBounds<T> + Clone + Send + Sync + 'static,
{
    move |text| {
        let n: T = text.parse().map_err(|err| format!("not a number: {err}"))?;
        if range.contains(&n) {
            return Ok(n);
        }
        Err(match (range.start_bound(), range.end_bound()) {
            (Bound::Included(min), Bound::Unbounded) => format!("must be at least {min}"),
            (Bound::Unbounded, Bound::Included(max)) => format!("must be at most {max}"),
            (Bound::Included(min), Bound::Included(max)) => format!("must be between {min} and {max}"),
            _ => "out of range".to_owned(),
        })
    }
}

/// The subcommand's own name once more, hidden: `bench gateway gateway` and `bench overhead
/// overhead` were accepted by the hand-written parsers (they skipped the word), so they still are.
pub fn own_name_again(name: &'static str) -> clap::Arg {
    clap::Arg::new("own-name-again").hide(true).num_args(1..).value_name(name).value_parser([name])
}
