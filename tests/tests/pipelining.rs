//! Pipelining: a client may send many requests before reading any
//! response (librdkafka keeps up to five in flight, Java up to five, and
//! non-idempotent librdkafka many more). The broker must answer every one,
//! in request order, and apply produces in that order.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use bytes::Bytes;
use tarn_e2e::{run_with_timeout, TarnBroker, TEST_TIMEOUT};
use tarn_protocol::error;
use tarn_protocol::header::{decode_response_header, RequestHeader};
use tarn_protocol::messages::api_versions::{ApiVersionsRequest, ApiVersionsResponse};
use tarn_protocol::messages::produce::*;
use tarn_protocol::record_batch::RecordBatchBuilder;
use tarn_protocol::{Decode, Encode, Reader, Version};

/// Requests sent before the first response is read: more than the broker's
/// per-connection read-ahead, so back-pressure is exercised too.
const IN_FLIGHT: i32 = 200;
const RECORDS_PER_BATCH: i64 = 3;

fn frame<T: Encode>(api_key: i16, version: Version, correlation_id: i32, body: &T) -> Vec<u8> {
    let header = RequestHeader {
        api_key,
        api_version: version.version,
        correlation_id,
        client_id: Some("pipelining-test".into()),
    };
    let mut out = vec![0u8; 4];
    header.encode(&mut out, version.flexible);
    body.encode(&mut out, version);
    let len = (out.len() - 4) as i32;
    out[..4].copy_from_slice(&len.to_be_bytes());
    out
}

fn produce_request(i: i32) -> ProduceRequest {
    let mut builder = RecordBatchBuilder::new();
    for r in 0..RECORDS_PER_BATCH {
        builder = builder.record(1_000 + r, None, Some(format!("req-{i}-{r}").as_bytes()));
    }
    ProduceRequest {
        transactional_id: None,
        acks: 1,
        timeout_ms: 1000,
        topic_data: vec![TopicProduceData {
            name: "pipe".into(),
            topic_id: Default::default(),
            partition_data: vec![PartitionProduceData {
                index: 0,
                records: Some(Bytes::from(builder.build())),
            }],
        }],
    }
}

fn read_frame(stream: &mut TcpStream) -> Reader {
    let mut len = [0u8; 4];
    stream.read_exact(&mut len).expect("read response length");
    let mut body = vec![0u8; i32::from_be_bytes(len) as usize];
    stream.read_exact(&mut body).expect("read response body");
    Reader::new(Bytes::from(body))
}

#[test]
fn many_in_flight_requests_are_answered_in_order() {
    run_with_timeout(TEST_TIMEOUT, || {
        let broker = TarnBroker::start();
        broker.create_topic("pipe", 1);
        let mut stream = TcpStream::connect(broker.bootstrap()).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(30)))
            .unwrap();
        let produce_v = Version::new(9, 9);
        let api_versions_v = Version::new(3, 3);
        // Every tenth request is an ApiVersions, so order across APIs is
        // checked too. All frames go out in one write before any read.
        let mut all = Vec::new();
        for i in 1..=IN_FLIGHT {
            if i % 10 == 0 {
                let request = ApiVersionsRequest {
                    client_software_name: "t".into(),
                    client_software_version: "1".into(),
                    ..Default::default()
                };
                all.extend(frame(18, api_versions_v, i, &request));
            } else {
                all.extend(frame(0, produce_v, i, &produce_request(i)));
            }
        }
        // Write from another thread: the broker's back-pressure may stop
        // reading until we read responses.
        let mut writer = stream.try_clone().unwrap();
        let sender = std::thread::spawn(move || writer.write_all(&all).unwrap());
        let mut expected_offset = 0;
        for i in 1..=IN_FLIGHT {
            let mut r = read_frame(&mut stream);
            if i % 10 == 0 {
                let correlation_id = decode_response_header(&mut r, 18, false).unwrap();
                assert_eq!(correlation_id, i);
                let response = ApiVersionsResponse::decode(&mut r, api_versions_v).unwrap();
                assert_eq!(response.error_code, error::NONE);
            } else {
                let correlation_id = decode_response_header(&mut r, 0, true).unwrap();
                assert_eq!(correlation_id, i, "responses must come in request order");
                let response = ProduceResponse::decode(&mut r, produce_v).unwrap();
                let p = &response.responses[0].partition_responses[0];
                assert_eq!(p.error_code, error::NONE, "{p:?}");
                assert_eq!(
                    p.base_offset, expected_offset,
                    "produces must be applied in request order"
                );
                expected_offset += RECORDS_PER_BATCH;
            }
        }
        sender.join().unwrap();
    });
}
