//! DescribeClientQuotas (key 48): the stored client quotas whose entities
//! match the request's filter (`tarn_metadata::client_quotas::QuotaFilter`), read
//! from the metadata image. A bad filter is answered with its error and
//! no entries, as Kafka does.
use std::sync::Arc;

use tarn_protocol::error;
use tarn_protocol::messages::client_quotas::{
    DescribeClientQuotasRequest, DescribeClientQuotasResponse, DescribeEntryData, EntityData,
    Float64, ValueData,
};

use tarn_metadata::client_quotas::QuotaFilter;

use super::{ApiSpec, RequestContext};
use crate::broker::Broker;

pub const KEY: i16 = 48;
pub const SPEC: ApiSpec = ApiSpec {
    key: KEY,
    name: "DescribeClientQuotas",
    min_version: 0,
    max_version: 1,
    flexible_min: 1,
};

pub async fn handle(
    broker: &Arc<Broker>,
    _ctx: &RequestContext,
    request: DescribeClientQuotasRequest,
) -> DescribeClientQuotasResponse {
    let filter = match QuotaFilter::new(&request.components, request.strict) {
        Ok(filter) => filter,
        Err(e) => {
            return DescribeClientQuotasResponse {
                throttle_time_ms: 0,
                error_code: e.code,
                error_message: Some(e.message),
                entries: None,
            }
        }
    };
    let image = broker.metadata.image();
    let entries = image
        .client_quotas
        .iter()
        .filter(|(entity, _)| filter.matches(entity))
        .map(|(entity, quotas)| DescribeEntryData {
            entity: entity
                .iter()
                .map(|(t, n)| EntityData {
                    entity_type: t.clone(),
                    entity_name: n.clone(),
                })
                .collect(),
            values: quotas
                .iter()
                .map(|(k, v)| ValueData {
                    key: k.clone(),
                    value: Float64(*v),
                })
                .collect(),
        })
        .collect();
    DescribeClientQuotasResponse {
        throttle_time_ms: 0,
        error_code: error::NONE,
        error_message: None,
        entries: Some(entries),
    }
}

#[cfg(test)]
mod tests {
    use tarn_protocol::messages::client_quotas::{
        AlterClientQuotasRequest, AlterEntryData, ComponentData, OpData, MATCH_TYPE_EXACT,
    };

    use super::*;
    use crate::handlers::alter_client_quotas;

    fn user(name: Option<&str>) -> Vec<EntityData> {
        vec![EntityData {
            entity_type: "user".into(),
            entity_name: name.map(str::to_owned),
        }]
    }

    fn op(key: &str, value: Option<f64>) -> OpData {
        OpData {
            key: key.into(),
            value: Float64(value.unwrap_or(0.0)),
            remove: value.is_none(),
        }
    }

    async fn alter(
        broker: &Arc<Broker>,
        entries: Vec<(Vec<EntityData>, Vec<OpData>)>,
        validate_only: bool,
    ) -> Vec<i16> {
        let ctx = crate::testing::request_context(&alter_client_quotas::SPEC, 1);
        let request = AlterClientQuotasRequest {
            entries: entries
                .into_iter()
                .map(|(entity, ops)| AlterEntryData { entity, ops })
                .collect(),
            validate_only,
        };
        alter_client_quotas::handle(broker, &ctx, request)
            .await
            .entries
            .iter()
            .map(|e| e.error_code)
            .collect()
    }

    async fn describe(
        broker: &Arc<Broker>,
        components: Vec<ComponentData>,
        strict: bool,
    ) -> Vec<(Option<String>, Vec<(String, f64)>)> {
        let ctx = crate::testing::request_context(&SPEC, 1);
        let response = handle(
            broker,
            &ctx,
            DescribeClientQuotasRequest { components, strict },
        )
        .await;
        assert_eq!(
            response.error_code,
            error::NONE,
            "{:?}",
            response.error_message
        );
        response
            .entries
            .unwrap()
            .iter()
            .map(|e| {
                let name = e.entity[0].entity_name.clone();
                let values = e
                    .values
                    .iter()
                    .map(|v| (v.key.clone(), v.value.0))
                    .collect();
                (name, values)
            })
            .collect()
    }

    #[tokio::test]
    async fn quotas_are_committed_read_back_and_survive_a_restart() {
        let dir = tempfile::tempdir().unwrap();
        let broker = crate::testing::broker_with_topic(dir.path(), "t", 1);
        let codes = alter(
            &broker,
            vec![
                (
                    user(Some("alice")),
                    vec![
                        op("producer_byte_rate", Some(1024.0)),
                        op("consumer_byte_rate", Some(2048.0)),
                    ],
                ),
                (user(None), vec![op("request_percentage", Some(50.0))]),
                (
                    user(Some("bob")),
                    vec![op("producer_byte_rate", Some(1.0)), op("bogus", Some(1.0))],
                ),
            ],
            false,
        )
        .await;
        assert_eq!(
            codes,
            vec![error::NONE, error::NONE, error::INVALID_REQUEST]
        );
        // validate_only changes nothing.
        assert_eq!(
            alter(
                &broker,
                vec![(
                    user(Some("carol")),
                    vec![op("producer_byte_rate", Some(5.0))]
                )],
                true
            )
            .await,
            vec![0]
        );
        // Removing one key keeps the others.
        assert_eq!(
            alter(
                &broker,
                vec![(user(Some("alice")), vec![op("consumer_byte_rate", None)])],
                false
            )
            .await,
            vec![0]
        );
        let expected = vec![
            (None, vec![("request_percentage".to_owned(), 50.0)]),
            (
                Some("alice".to_owned()),
                vec![("producer_byte_rate".to_owned(), 1024.0)],
            ),
        ];
        assert_eq!(describe(&broker, vec![], false).await, expected);
        let exact = ComponentData {
            entity_type: "user".into(),
            match_type: MATCH_TYPE_EXACT,
            r#match: Some("alice".into()),
        };
        assert_eq!(
            describe(&broker, vec![exact], true).await,
            expected[1..].to_vec()
        );
        broker.shutdown().unwrap();

        let broker = crate::testing::broker_with_topic(dir.path(), "u", 1);
        assert_eq!(describe(&broker, vec![], false).await, expected);
        broker.shutdown().unwrap();
    }
}
