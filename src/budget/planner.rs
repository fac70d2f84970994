//! The pure heart of budgeting: which fresh results of one message to
//! persist. No I/O, no clocks, no locks; property-tested below.

/// One tool_result of a user message, as the planner sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Candidate {
    /// Size as it will be sent if not chosen now.
    pub size: u64,
    /// A fresh eligible result; anything else has its fate fixed already
    /// (ineligible, frozen, or a reapplied replacement whose `size` is then
    /// the replacement's).
    pub fresh: bool,
}

/// The indexes of the candidates to persist, in the order they were chosen:
/// every fresh result above its own `max_result(i)` (per-tool limits), then
/// the largest remaining fresh results (ties by position) while the message
/// total exceeds `max_message`.
/// A result that already fits is never chosen, and neither is one whose
/// replacement would not be smaller than it (PROTOCOL.md 10.1): budgeting
/// never makes a message bigger, and the aggregate loop ends when no fresh
/// candidate would shrink it. `replacement_size(i)` is the size candidate
/// `i` would have once replaced; it is asked only of candidates considered.
pub fn choose(
    candidates: &[Candidate],
    max_result: impl Fn(usize) -> u64,
    max_message: u64,
    mut replacement_size: impl FnMut(usize) -> u64,
) -> Vec<(usize, u64)> {
    let mut order: Vec<usize> = (0..candidates.len())
        .filter(|&i| candidates[i].fresh)
        .collect();
    // Stable sort keeps position order among equal sizes.
    order.sort_by(|&a, &b| candidates[b].size.cmp(&candidates[a].size));

    // Those over their own limit first (with one limit for all, they are a
    // prefix of the largest-first order), then the rest in that order.
    let (over, rest): (Vec<usize>, Vec<usize>) = order
        .into_iter()
        .partition(|&i| candidates[i].size > max_result(i));
    let mut total: u64 = candidates.iter().map(|c| c.size).sum();
    let mut chosen = Vec::new();
    for (i, forced) in over
        .into_iter()
        .map(|i| (i, true))
        .chain(rest.into_iter().map(|i| (i, false)))
    {
        if !forced && total <= max_message {
            break;
        }
        let c = candidates[i];
        let replaced = replacement_size(i);
        if replaced >= c.size {
            continue;
        }
        total = total - c.size + replaced;
        chosen.push((i, replaced));
    }
    chosen
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Replacements are a fixed-size header plus a preview of at most
    /// `PREVIEW` units, so they may be larger than a small original.
    const PREVIEW: u64 = 300;
    fn replacement(c: &[Candidate], i: usize) -> u64 {
        120 + c[i].size.min(PREVIEW)
    }

    fn candidates() -> impl Strategy<Value = Vec<Candidate>> {
        prop::collection::vec(
            (0u64..5_000, prop::bool::weighted(0.7))
                .prop_map(|(size, fresh)| Candidate { size, fresh }),
            0..24,
        )
    }

    fn run(c: &[Candidate], max_result: u64, max_message: u64) -> Vec<usize> {
        choose(c, |_| max_result, max_message, |i| replacement(c, i))
            .into_iter()
            .map(|(i, _)| i)
            .collect()
    }

    fn total_after(c: &[Candidate], chosen: &[usize]) -> u64 {
        c.iter()
            .enumerate()
            .map(|(i, x)| {
                if chosen.contains(&i) {
                    replacement(c, i)
                } else {
                    x.size
                }
            })
            .sum()
    }

    /// Fresh indexes whose replacement is smaller, largest first, ties by
    /// position.
    fn largest_first(c: &[Candidate]) -> Vec<usize> {
        let mut order: Vec<usize> = (0..c.len())
            .filter(|&i| c[i].fresh && replacement(c, i) < c[i].size)
            .collect();
        order.sort_by(|&a, &b| c[b].size.cmp(&c[a].size).then(a.cmp(&b)));
        order
    }

    proptest! {
        #[test]
        fn fits_unless_only_fixed_content_remains(c in candidates(), max_result in 0u64..6_000, max_message in 0u64..40_000) {
            let chosen = run(&c, max_result, max_message);
            let shrinkable = largest_first(&c).len();
            prop_assert!(total_after(&c, &chosen) <= max_message || chosen.len() == shrinkable);
            // Never bigger: not the message, not one result.
            prop_assert!(total_after(&c, &chosen) <= total_after(&c, &[]));
            for &i in &chosen {
                prop_assert!(replacement(&c, i) < c[i].size);
            }
        }

        #[test]
        fn chosen_is_the_shortest_sufficient_largest_first_prefix(c in candidates(), max_result in 0u64..6_000, max_message in 0u64..40_000) {
            let chosen = run(&c, max_result, max_message);
            let order = largest_first(&c);
            prop_assert_eq!(&chosen[..], &order[..chosen.len()]);
            // Every result above the per-result limit that would shrink is in.
            for &i in &order {
                if c[i].size > max_result { prop_assert!(chosen.contains(&i)); }
            }
            // No shorter prefix satisfies both limits.
            if let Some(k) = chosen.len().checked_sub(1) {
                let shorter = &order[..k];
                let over_result = order[k..].iter().any(|&i| c[i].size > max_result);
                prop_assert!(over_result || total_after(&c, shorter) > max_message);
            }
        }

        #[test]
        fn choosing_again_after_applying_changes_nothing(c in candidates(), max_result in 0u64..6_000, max_message in 0u64..40_000) {
            let chosen = run(&c, max_result, max_message);
            // After the commit every fresh result is decided: chosen ones carry
            // their replacement, the others are frozen as they were.
            let applied: Vec<Candidate> = c.iter().enumerate().map(|(i, x)| Candidate {
                size: if chosen.contains(&i) { replacement(&c, i) } else { x.size },
                fresh: false,
            }).collect();
            prop_assert!(run(&applied, max_result, max_message).is_empty());
            prop_assert_eq!(total_after(&applied, &[]), total_after(&c, &chosen));
        }
    }
}
