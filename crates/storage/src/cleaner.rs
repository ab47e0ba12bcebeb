//! `LogCleaner`: log compaction (`cleanup.policy=compact`).
//!
//! Recovery side: a cleaned segment is written as `<base>.log.cleaned`,
//! fsynced, renamed to `<base>.log.swap` (the commit point), then the
//! segments it replaces are renamed to `*.deleted` and the swap file is
//! renamed to `<base>.log`. [`recover_interrupted_cleaning`] runs when a
//! log opens and finishes whatever step a crash interrupted: `.cleaned`
//! files are dropped (the originals are intact), a `.swap` file replaces
//! every segment whose base offset falls in its offset range, and
//! `.deleted`/`.tmp` leftovers are removed.

use std::path::Path;

use tarn_protocol::record_batch::{parse_header, RECORD_BATCH_HEADER_SIZE};
use tracing::warn;

use crate::error::StorageError;
use crate::file::{LogEnv, SegmentFile};
use crate::log::{is_leftover_file, parse_segment_log_name, SWAP_SUFFIX};
use crate::segment::segment_file_name;

/// Finishes or undoes an interrupted cleaning in `dir` (whose entries are
/// `names`). Returns whether it changed anything.
pub(crate) fn recover_interrupted_cleaning(
    env: &LogEnv,
    dir: &Path,
    names: &[String],
) -> Result<bool, StorageError> {
    let mut changed = false;
    for name in names.iter().filter(|n| is_leftover_file(n)) {
        env.remove_if_exists(&dir.join(name))?;
        changed = true;
    }
    let mut swaps: Vec<i64> = names
        .iter()
        .filter_map(|n| n.strip_suffix(SWAP_SUFFIX))
        .filter_map(parse_segment_log_name)
        .collect();
    swaps.sort_unstable();
    for base in swaps {
        let swap = dir.join(format!("{}{SWAP_SUFFIX}", segment_file_name(base, "log")));
        let last_offset = last_offset_in(env, &swap)?.unwrap_or(base);
        warn!(file = %swap.display(), last_offset, "completing an interrupted compaction swap");
        for old in names.iter().filter_map(|n| parse_segment_log_name(n)) {
            if (base..=last_offset).contains(&old) {
                for suffix in ["log", "index", "timeindex"] {
                    env.remove_if_exists(&dir.join(segment_file_name(old, suffix)))?;
                }
            }
        }
        for suffix in ["index", "timeindex"] {
            env.remove_if_exists(&dir.join(segment_file_name(base, suffix)))?;
        }
        env.rename(&swap, &dir.join(segment_file_name(base, "log")))?;
        env.sync_dir(dir)?;
        changed = true;
    }
    Ok(changed)
}

/// The last offset of the last whole batch in a segment file, by walking
/// the batch headers.
fn last_offset_in(env: &LogEnv, path: &Path) -> Result<Option<i64>, StorageError> {
    let file = SegmentFile::open(env, path)?;
    let mut position = 0u64;
    let mut last = None;
    let mut header_buf = [0u8; RECORD_BATCH_HEADER_SIZE];
    while position + RECORD_BATCH_HEADER_SIZE as u64 <= file.size() {
        file.read_at(position, &mut header_buf)?;
        let Ok(header) = parse_header(&header_buf) else {
            break;
        };
        if position + header.total_size() as u64 > file.size() {
            break;
        }
        last = Some(header.last_offset());
        position += header.total_size() as u64;
    }
    Ok(last)
}
