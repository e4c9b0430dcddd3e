//! The command-line value parsers the `model` and `conformance` binaries share: counts that
//! name their flag when negative, and fault budgets that take `any` (spec.md §7.1) or refuse it
//! in one line saying why.

use crate::config::Budget;

/// A clap value parser for a count in `low..=high`; clap's error names the flag and the range.
/// The flag takes hyphen values (`allow_hyphen_values`), so that a negative number reaches this
/// parser and gets one line naming the flag, not clap's "unexpected argument".
pub fn count_in<T>(low: u64, high: u64) -> NonNegative<T>
where
    T: TryFrom<u64> + Clone + Send + Sync + 'static,
    <T as TryFrom<u64>>::Error: Send + Sync + 'static + std::error::Error + ToString,
{
    NonNegative(clap::builder::RangedU64ValueParser::new().range(low..=high))
}

/// `count_in`'s parser: a negative integer is "--FLAG must be a non-negative integer, got -1";
/// everything else is the range parser's.
#[derive(Clone)]
pub struct NonNegative<T>(clap::builder::RangedU64ValueParser<T>)
where
    T: TryFrom<u64> + Clone + Send + Sync + 'static,
    <T as TryFrom<u64>>::Error: Send + Sync + 'static + std::error::Error + ToString;

impl<T> clap::builder::TypedValueParser for NonNegative<T>
where
    T: TryFrom<u64> + Clone + Send + Sync + 'static,
    <T as TryFrom<u64>>::Error: Send + Sync + 'static + std::error::Error + ToString,
{
    type Value = T;

    fn parse_ref(
        &self,
        cmd: &clap::Command,
        arg: Option<&clap::Arg>,
        value: &std::ffi::OsStr,
    ) -> Result<T, clap::Error> {
        let text = value.to_str().unwrap_or_default();
        let negative = text
            .strip_prefix('-')
            .is_some_and(|digits| !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()));
        if negative {
            let flag =
                arg.and_then(clap::Arg::get_long).map_or_else(|| "the value".to_string(), |long| format!("--{long}"));
            let message = format!("{flag} must be a non-negative integer, got {text}\n");
            return Err(clap::Error::raw(clap::error::ErrorKind::ValueValidation, message));
        }
        self.0.parse_ref(cmd, arg, value)
    }
}

/// Why the other budgets take no `any` (spec.md §7.1: the abstraction keeps the log exact).
pub const GROWS_THE_LOG: &str = "every one appends a record once more, so the log would grow without bound";
pub const MOVES_THE_START: &str =
    "retention is kept exact (the log start is durable state the abstraction does not rename)";
pub const NOT_LIFTED: &str = "only --crashes, --rebalances and --pauses take any";

/// A liftable budget's parser: `any`, or a count as `count_in` parses it.
pub fn budget_in() -> BudgetParser {
    BudgetParser { why_not_any: None }
}

/// A budget that takes no `any`: the word gets one line saying why; a count is `count_in`'s.
pub fn count_not_any(why: &'static str) -> BudgetParser {
    BudgetParser { why_not_any: Some(why) }
}

/// `budget_in` and `count_not_any`: `Budget::Any` only when `why_not_any` is `None`.
#[derive(Clone)]
pub struct BudgetParser {
    why_not_any: Option<&'static str>,
}

impl clap::builder::TypedValueParser for BudgetParser {
    type Value = Budget;

    fn parse_ref(
        &self,
        cmd: &clap::Command,
        arg: Option<&clap::Arg>,
        value: &std::ffi::OsStr,
    ) -> Result<Budget, clap::Error> {
        if value.to_str() != Some(Budget::ANY) {
            return count_in::<u8>(0, u64::from(u8::MAX)).parse_ref(cmd, arg, value).map(Budget::Count);
        }
        match self.why_not_any {
            None => Ok(Budget::Any),
            Some(why) => {
                let flag = arg
                    .and_then(clap::Arg::get_long)
                    .map_or_else(|| "the value".to_string(), |long| format!("--{long}"));
                let message = format!("{flag} any is refused: {why} (give a count)\n");
                Err(clap::Error::raw(clap::error::ErrorKind::ValueValidation, message))
            }
        }
    }
}

/// A budget `count_not_any` parsed: always a count.
pub fn count_of(budget: Option<Budget>) -> Option<u8> {
    budget.map(|budget| match budget {
        Budget::Count(count) => count,
        Budget::Any => unreachable!("count_not_any refuses any"),
    })
}
