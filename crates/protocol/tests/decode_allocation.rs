//! What decoding really allocates, measured with a counting allocator:
//! hostile frames whose arrays announce (or decode to) far more than
//! their bytes must not make the decoder allocate more than the frame's
//! decode budget (`codec::decode_budget_bytes`), whatever the count says.
//!
//! The counters are per thread, so tests running in parallel do not see
//! each other's allocations.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use bytes::Bytes;
use tarn_protocol::codec::{
    decode_budget_bytes, put_uvarint, Decode, DecodeError, Reader, Version,
};
use tarn_protocol::messages::create_topics::CreateTopicsRequest;
use tarn_protocol::messages::delete_groups::DeleteGroupsRequest;

struct Counting;

thread_local! {
    static LIVE_BYTES: Cell<i64> = const { Cell::new(0) };
    static PEAK_BYTES: Cell<i64> = const { Cell::new(0) };
}

fn count(delta: i64) {
    // During thread teardown the counters may be gone: nothing to count.
    let _gone = LIVE_BYTES.try_with(|live| {
        let now = live.get() + delta;
        live.set(now);
        let _gone = PEAK_BYTES.try_with(|peak| peak.set(peak.get().max(now)));
    });
}

// SAFETY: every call is forwarded unchanged to the system allocator; the
// counters only observe sizes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            count(layout.size() as i64);
        }
        p
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) };
        count(-(layout.size() as i64));
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            count(new_size as i64 - layout.size() as i64);
        }
        p
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// The most this thread had allocated at once while `f` ran, beyond what
/// it held before.
fn peak_during<R>(f: impl FnOnce() -> R) -> (R, usize) {
    let start = LIVE_BYTES.with(Cell::get);
    PEAK_BYTES.with(|peak| peak.set(start));
    let out = f();
    let peak = PEAK_BYTES.with(Cell::get) - start;
    (out, usize::try_from(peak).unwrap_or(0))
}

/// A flexible request body whose only field is a compact array of
/// `count` elements, each `element` on the wire.
fn compact_array(count: usize, element: &[u8]) -> Bytes {
    let mut body = Vec::with_capacity(count * element.len() + 8);
    put_uvarint(&mut body, count as u32 + 1);
    for _ in 0..count {
        body.extend_from_slice(element);
    }
    Bytes::from(body)
}

fn assert_within_budget(what: &str, frame_bytes: usize, peak: usize) {
    let budget = decode_budget_bytes(frame_bytes);
    assert!(
        peak <= budget,
        "{what}: decoding a {frame_bytes}-byte frame allocated {peak} bytes at peak, \
         over its budget of {budget}"
    );
}

#[test]
fn delete_groups_of_empty_names_stays_within_the_budget() {
    // DeleteGroups v2: 4M empty compact strings, 1 byte each on the wire,
    // 24 bytes each as a String.
    let mut frame = compact_array(4_000_000, &[1]).to_vec();
    frame.push(0); // tagged fields
    let frame_bytes = frame.len();
    let frame = Bytes::from(frame);
    let (decoded, peak) = peak_during(|| {
        DeleteGroupsRequest::decode(&mut Reader::new(frame.clone()), Version::new(2, 2))
    });
    assert_within_budget("DeleteGroups v2", frame_bytes, peak);
    assert!(
        matches!(decoded, Err(DecodeError::TooLarge { .. })),
        "{decoded:?}"
    );
}

#[test]
fn an_i32_array_whose_count_overstates_it_allocates_what_decoded() {
    // Classic Vec<i32>: a count of 4M in a 4 MB frame, which holds 1M.
    let elements = 4_000_000usize;
    let mut frame = (elements as i32).to_be_bytes().to_vec();
    frame.resize(4 + elements, 0);
    let frame_bytes = frame.len();
    let frame = Bytes::from(frame);
    let (decoded, peak) =
        peak_during(|| Vec::<i32>::decode(&mut Reader::new(frame.clone()), Version::new(0, 9)));
    // What really decoded is 1M i32s (one frame's worth): the vector may
    // have grown to twice that, never to count * 4.
    assert!(
        peak <= 2 * frame_bytes,
        "{peak} bytes allocated for a {frame_bytes}-byte frame"
    );
    assert!(
        matches!(decoded, Err(DecodeError::Truncated { .. })),
        "{decoded:?}"
    );
}

#[test]
fn an_array_of_small_structs_stays_within_the_budget() {
    // CreateTopics v5: one topic with 2M configs of 3 bytes each (empty
    // name, null value, no tags), 48 bytes each decoded.
    let configs = 2_000_000usize;
    let mut frame = Vec::new();
    put_uvarint(&mut frame, 2); // one topic
    frame.extend_from_slice(&[2, b't']); // name "t"
    frame.extend_from_slice(&1i32.to_be_bytes()); // num_partitions
    frame.extend_from_slice(&1i16.to_be_bytes()); // replication_factor
    put_uvarint(&mut frame, 1); // no assignments
    frame.extend_from_slice(&compact_array(configs, &[1, 0, 0]));
    frame.push(0); // the topic's tags
    frame.extend_from_slice(&1000i32.to_be_bytes()); // timeout_ms
    frame.push(0); // validate_only
    frame.push(0); // tags
    let frame_bytes = frame.len();
    let frame = Bytes::from(frame);
    let (decoded, peak) = peak_during(|| {
        CreateTopicsRequest::decode(&mut Reader::new(frame.clone()), Version::new(5, 5))
    });
    assert_within_budget("CreateTopics v5", frame_bytes, peak);
    assert!(
        matches!(decoded, Err(DecodeError::TooLarge { .. })),
        "{decoded:?}"
    );
}
