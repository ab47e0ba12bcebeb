//! ListTransactions (KIP-664): the transactions this broker's transaction
//! coordinator holds, as `kafka-transactions.sh list` asks every broker.
//! Tarn has no transaction coordinator yet (transactional ids are refused
//! at FindCoordinator and InitProducerId), so there are none, and the
//! answer is Kafka's for a coordinator that holds none: no transactions,
//! the state filters that name no transaction state listed back as
//! unknown, and a transactional-id pattern (v2, KIP-1152) that does not
//! compile refused with INVALID_REGULAR_EXPRESSION. Kafka compiles it
//! with RE2/J, whose syntax the `regex` crate shares (no look-around, no
//! back-references).
use std::sync::Arc;

use tarn_protocol::error;
use tarn_protocol::messages::list_transactions::{
    ListTransactionsRequest, ListTransactionsResponse,
};

use super::{ApiSpec, RequestContext};
use crate::broker::Broker;

pub const KEY: i16 = 66;
pub const SPEC: ApiSpec = ApiSpec {
    key: KEY,
    name: "ListTransactions",
    min_version: 0,
    max_version: 2,
    flexible_min: 0,
};

/// The transaction states Kafka's coordinator names (`TransactionState`).
const TRANSACTION_STATES: &[&str] = &[
    "Empty",
    "Ongoing",
    "PrepareCommit",
    "PrepareAbort",
    "CompleteCommit",
    "CompleteAbort",
    "Dead",
    "PrepareEpochFence",
];

pub async fn handle(
    _broker: &Arc<Broker>,
    _ctx: &RequestContext,
    request: ListTransactionsRequest,
) -> ListTransactionsResponse {
    list(&request)
}

fn list(request: &ListTransactionsRequest) -> ListTransactionsResponse {
    let pattern = request
        .transactional_id_pattern
        .as_deref()
        .filter(|p| !p.is_empty());
    if let Some(pattern) = pattern {
        if let Err(e) = regex::Regex::new(pattern) {
            tracing::debug!(pattern, error = %e, "ListTransactions with a pattern that does not compile");
            return ListTransactionsResponse {
                error_code: error::INVALID_REGULAR_EXPRESSION,
                ..Default::default()
            };
        }
    }
    let mut unknown_state_filters: Vec<String> = Vec::new();
    for filter in &request.state_filters {
        if !TRANSACTION_STATES.contains(&filter.as_str()) && !unknown_state_filters.contains(filter)
        {
            unknown_state_filters.push(filter.clone());
        }
    }
    ListTransactionsResponse {
        throttle_time_ms: 0,
        error_code: error::NONE,
        unknown_state_filters,
        transaction_states: Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_transactions_with_unknown_filters_listed_once() {
        let answer = list(&ListTransactionsRequest {
            state_filters: vec![
                "Ongoing".into(),
                "ongoing".into(),
                "Bogus".into(),
                "ongoing".into(),
            ],
            producer_id_filters: vec![7],
            duration_filter: 1000,
            transactional_id_pattern: Some("app-.*".into()),
        });
        assert_eq!(answer.error_code, error::NONE);
        assert_eq!(answer.unknown_state_filters, vec!["ongoing", "Bogus"]);
        assert!(answer.transaction_states.is_empty());
    }

    #[test]
    fn a_pattern_that_does_not_compile_is_refused() {
        let with = |pattern: &str| {
            list(&ListTransactionsRequest {
                transactional_id_pattern: Some(pattern.into()),
                ..Default::default()
            })
            .error_code
        };
        assert_eq!(with("["), error::INVALID_REGULAR_EXPRESSION);
        assert_eq!(with("(?=lookahead)"), error::INVALID_REGULAR_EXPRESSION);
        assert_eq!(with(""), error::NONE);
        assert_eq!(with("txn-[0-9]+"), error::NONE);
    }
}
