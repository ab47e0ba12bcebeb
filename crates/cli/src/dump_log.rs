//! `tarn dump-log FILE…`: prints the record batches of `.log` segment
//! files, and the entries of `.index` / `.timeindex` files, like Kafka's
//! kafka-dump-log.sh; `--verify-index` checks index files against their
//! segment instead.
//!
//! Files are streamed: a batch is read whole (to check its CRC) but never
//! more than one at a time, and no batch larger than [`MAX_BATCH_BYTES`] is
//! read. Output goes to stdout; progress for files over
//! [`PROGRESS_MIN_BYTES`] goes to stderr every 10%. The command exits
//! non-zero when a file cannot be read, holds a corrupt batch or invalid
//! trailing bytes, or (with `--verify-index`) when an index disagrees with
//! its segment.

use std::fs::File;
use std::io::{self, BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use clap::Args;

use tarn_protocol::record_batch::{
    compute_crc, parse_header, Compression, RecordBatchHeader, RecordIter, TimestampType,
    MIN_BATCH_LENGTH, RECORD_BATCH_HEADER_SIZE,
};

/// The largest batch this tool reads (Kafka's `message.max.bytes` can be
/// raised, but not to anything near this).
pub const MAX_BATCH_BYTES: usize = 256 << 20;
/// Files at least this large report progress on stderr.
pub const PROGRESS_MIN_BYTES: u64 = 64 << 20;
/// Mismatches printed per index file; the rest are counted.
pub const MAX_MISMATCHES_SHOWN: usize = 100;
/// Bytes of a key or value printed with `--print-data`.
pub const MAX_PRINTED_BYTES: usize = 4096;
const OFFSET_INDEX_ENTRY_SIZE: usize = 8;
const TIME_INDEX_ENTRY_SIZE: usize = 12;

#[derive(Args)]
pub struct DumpLogArgs {
    /// Segment files (.log), offset indexes (.index) or time indexes (.timeindex).
    #[arg(required = true, value_name = "FILE")]
    files: Vec<PathBuf>,
    /// Also print each record of uncompressed batches.
    #[arg(long)]
    print_data: bool,
    /// Check .index/.timeindex files against their segment (for a .log,
    /// check the indexes beside it) instead of printing.
    #[arg(long)]
    verify_index: bool,
}

pub fn run(args: DumpLogArgs) -> Result<()> {
    let stdout = io::stdout();
    let mut out = BufWriter::new(stdout.lock());
    let mut failed = Vec::new();
    for file in &args.files {
        let outcome = dump_file(file, &args, &mut out, &mut io::stderr())
            .and_then(|o| out.flush().context("write to stdout").map(|()| o));
        // A reader that stopped reading (`| head`) is not an error here.
        if outcome.as_ref().is_err_and(is_broken_pipe) {
            return Ok(());
        }
        match outcome {
            Ok(Outcome::Clean) => {}
            Ok(Outcome::Problems(n)) => failed.push(format!("{}: {n} problem(s)", file.display())),
            Err(e) => {
                eprintln!("tarn dump-log: {}: {e:#}", file.display());
                failed.push(format!("{}: {e:#}", file.display()));
            }
        }
    }
    if !failed.is_empty() {
        bail!("{}", failed.join("; "));
    }
    Ok(())
}

pub(crate) fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|cause| {
        cause
            .downcast_ref::<io::Error>()
            .is_some_and(|io| io.kind() == io::ErrorKind::BrokenPipe)
    })
}

/// What checking one file found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Clean,
    Problems(usize),
}

impl Outcome {
    fn from_count(n: usize) -> Outcome {
        if n == 0 {
            Outcome::Clean
        } else {
            Outcome::Problems(n)
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Log,
    OffsetIndex,
    TimeIndex,
}

fn kind_of(path: &Path) -> Result<Kind> {
    match path.extension().and_then(|e| e.to_str()) {
        Some("log") => Ok(Kind::Log),
        Some("index") => Ok(Kind::OffsetIndex),
        Some("timeindex") => Ok(Kind::TimeIndex),
        _ => bail!("not a .log, .index or .timeindex file"),
    }
}

/// The segment's base offset, from its 20-digit file name.
fn base_offset_of(path: &Path) -> Result<i64> {
    let stem = path
        .file_stem()
        .and_then(|s| s.to_str())
        .context("file name is not UTF-8")?;
    stem.parse::<i64>()
        .ok()
        .filter(|o| *o >= 0)
        .with_context(|| format!("file name {stem} is not a segment base offset"))
}

pub fn dump_file(
    path: &Path,
    args: &DumpLogArgs,
    out: &mut dyn Write,
    progress: &mut dyn Write,
) -> Result<Outcome> {
    let kind = kind_of(path)?;
    if args.verify_index {
        return match kind {
            Kind::Log => {
                let mut problems = 0;
                let mut checked = 0;
                for suffix in ["index", "timeindex"] {
                    let index = path.with_extension(suffix);
                    if index.exists() {
                        checked += 1;
                        if let Outcome::Problems(n) = verify_index(&index, out)? {
                            problems += n;
                        }
                    }
                }
                if checked == 0 {
                    writeln!(out, "{}: no .index or .timeindex beside it", path.display())?;
                }
                Ok(Outcome::from_count(problems))
            }
            _ => verify_index(path, out),
        };
    }
    match kind {
        Kind::Log => dump_segment(path, args.print_data, out, progress, PROGRESS_MIN_BYTES),
        Kind::OffsetIndex | Kind::TimeIndex => dump_index(path, kind, out),
    }
}

/// One batch read from a segment file.
struct Batch {
    position: u64,
    header: RecordBatchHeader,
    bytes: Vec<u8>,
}

/// Why reading batches stopped before the end of the file.
#[derive(Debug)]
struct InvalidTail {
    position: u64,
    reason: String,
}

/// Streams the batches of a segment file.
struct SegmentReader {
    reader: BufReader<File>,
    position: u64,
    size: u64,
    /// Read only headers, skipping bodies (no CRC check).
    headers_only: bool,
}

impl SegmentReader {
    fn open(path: &Path, headers_only: bool) -> Result<SegmentReader> {
        let file = File::open(path).with_context(|| format!("open {}", path.display()))?;
        let size = file
            .metadata()
            .with_context(|| format!("stat {}", path.display()))?
            .len();
        Ok(SegmentReader {
            reader: BufReader::with_capacity(1 << 20, file),
            position: 0,
            size,
            headers_only,
        })
    }

    /// The next batch, `Ok(None)` at a clean end, `Err` for a tail that is
    /// not a batch (after which nothing more can be read).
    fn next(&mut self) -> io::Result<Result<Option<Batch>, InvalidTail>> {
        if self.position >= self.size {
            return Ok(Ok(None));
        }
        let position = self.position;
        let remaining = self.size - position;
        let invalid = |reason: String| Ok(Err(InvalidTail { position, reason }));
        if remaining < RECORD_BATCH_HEADER_SIZE as u64 {
            return invalid(format!(
                "{remaining} bytes, fewer than a batch header ({RECORD_BATCH_HEADER_SIZE})"
            ));
        }
        let mut head = vec![0u8; RECORD_BATCH_HEADER_SIZE];
        self.reader.read_exact(&mut head)?;
        let header = match parse_header(&head) {
            Ok(h) => h,
            Err(e) => return invalid(e.to_string()),
        };
        let total = header.total_size();
        if header.batch_length < MIN_BATCH_LENGTH || total > MAX_BATCH_BYTES {
            return invalid(format!(
                "batch length {} is not plausible",
                header.batch_length
            ));
        }
        if total as u64 > remaining {
            return invalid(format!(
                "batch of {total} bytes runs past the end of the file ({remaining} bytes left)"
            ));
        }
        let bytes = if self.headers_only {
            self.reader
                .seek_relative((total - RECORD_BATCH_HEADER_SIZE) as i64)?;
            head
        } else {
            let mut bytes = head;
            bytes.resize(total, 0);
            self.reader
                .read_exact(&mut bytes[RECORD_BATCH_HEADER_SIZE..])?;
            bytes
        };
        self.position += total as u64;
        Ok(Ok(Some(Batch {
            position,
            header,
            bytes,
        })))
    }
}

fn codec_name(c: Compression) -> &'static str {
    match c {
        Compression::None => "none",
        Compression::Gzip => "gzip",
        Compression::Snappy => "snappy",
        Compression::Lz4 => "lz4",
        Compression::Zstd => "zstd",
    }
}

fn timestamp_type_name(h: &RecordBatchHeader) -> &'static str {
    match h.timestamp_type() {
        TimestampType::CreateTime => "CreateTime",
        TimestampType::LogAppendTime => "LogAppendTime",
    }
}

/// Reports progress every tenth of a large file.
struct Progress<'a> {
    name: String,
    size: u64,
    next_tenth: u64,
    sink: Option<&'a mut dyn Write>,
}

impl<'a> Progress<'a> {
    fn new(path: &Path, size: u64, min_bytes: u64, sink: &'a mut dyn Write) -> Progress<'a> {
        Progress {
            name: path.display().to_string(),
            size,
            next_tenth: 1,
            sink: (size >= min_bytes && size > 0).then_some(sink),
        }
    }

    fn at(&mut self, position: u64) -> io::Result<()> {
        let Some(sink) = self.sink.as_mut() else {
            return Ok(());
        };
        while self.next_tenth <= 9 && position * 10 >= self.next_tenth * self.size {
            writeln!(
                sink,
                "tarn dump-log: {}: {}% ({position} of {} bytes)",
                self.name,
                self.next_tenth * 10,
                self.size
            )?;
            self.next_tenth += 1;
        }
        Ok(())
    }
}

fn dump_segment(
    path: &Path,
    print_data: bool,
    out: &mut dyn Write,
    progress_sink: &mut dyn Write,
    progress_min_bytes: u64,
) -> Result<Outcome> {
    let base_offset = base_offset_of(path)?;
    let mut reader = SegmentReader::open(path, false)?;
    let mut progress = Progress::new(path, reader.size, progress_min_bytes, progress_sink);
    writeln!(out, "Dumping {}", path.display())?;
    writeln!(out, "Log starting offset: {base_offset}")?;
    let mut problems = 0usize;
    let (mut batches, mut records) = (0u64, 0u64);
    loop {
        let batch = match reader
            .next()
            .with_context(|| format!("read {} at {}", path.display(), reader.position))?
        {
            Ok(Some(batch)) => batch,
            Ok(None) => break,
            Err(tail) => {
                writeln!(
                    out,
                    "Found {} invalid bytes at the end of {} (position {}): {}",
                    reader.size - tail.position,
                    path.display(),
                    tail.position,
                    tail.reason
                )?;
                problems += 1;
                break;
            }
        };
        let valid = compute_crc(&batch.bytes) == batch.header.crc;
        if !valid {
            problems += 1;
        }
        print_batch(out, &batch, valid)?;
        if print_data {
            print_records(out, &batch)?;
        }
        batches += 1;
        records += u64::try_from(batch.header.records_count).unwrap_or(0);
        progress.at(reader.position)?;
    }
    writeln!(
        out,
        "Summary: {batches} batches, {records} records, {} bytes{}",
        reader.position,
        if problems > 0 {
            format!(", {problems} problem(s)")
        } else {
            String::new()
        }
    )?;
    Ok(Outcome::from_count(problems))
}

fn print_batch(out: &mut dyn Write, batch: &Batch, valid: bool) -> io::Result<()> {
    let h = &batch.header;
    writeln!(
        out,
        "baseOffset: {} lastOffset: {} count: {} baseSequence: {} lastSequence: {} \
         producerId: {} producerEpoch: {} partitionLeaderEpoch: {} isTransactional: {} \
         isControl: {}{} position: {} timestampType: {} baseTimestamp: {} maxTimestamp: {} \
         size: {} magic: {} compresscodec: {} crc: {} isvalid: {}",
        h.base_offset,
        h.last_offset(),
        h.records_count,
        h.base_sequence,
        h.last_sequence(),
        h.producer_id,
        h.producer_epoch,
        h.partition_leader_epoch,
        h.is_transactional(),
        h.is_control(),
        // KIP-534: set by the log cleaner on batches that kept a tombstone.
        h.delete_horizon_ms()
            .map_or(String::new(), |ms| format!(" deleteHorizonMs: {ms}")),
        batch.position,
        timestamp_type_name(h),
        h.base_timestamp,
        h.max_timestamp,
        h.total_size(),
        h.magic,
        codec_name(h.compression()),
        h.crc,
        valid
    )
}

/// Bytes as one line of text: lossy UTF-8 with control characters
/// escaped, cut at [`MAX_PRINTED_BYTES`].
fn printable(bytes: &[u8]) -> String {
    let shown = &bytes[..bytes.len().min(MAX_PRINTED_BYTES)];
    let mut text: String = String::from_utf8_lossy(shown)
        .chars()
        .flat_map(|c| {
            if c.is_control() {
                c.escape_default().collect::<Vec<_>>()
            } else {
                vec![c]
            }
        })
        .collect();
    if shown.len() < bytes.len() {
        text.push_str(&format!("… ({} bytes)", bytes.len()));
    }
    text
}

fn print_records(out: &mut dyn Write, batch: &Batch) -> io::Result<()> {
    let h = &batch.header;
    if h.compression() != Compression::None {
        return writeln!(
            out,
            "| compressed ({}) — records not shown",
            codec_name(h.compression())
        );
    }
    let iter = match RecordIter::new(&batch.bytes, h) {
        Ok(iter) => iter,
        Err(e) => return writeln!(out, "| records unreadable: {e}"),
    };
    for record in iter {
        let record = match record {
            Ok(r) => r,
            Err(e) => return writeln!(out, "| malformed record: {e}"),
        };
        let offset = h.base_offset + i64::from(record.offset_delta);
        let timestamp = match h.timestamp_type() {
            TimestampType::LogAppendTime => h.max_timestamp,
            TimestampType::CreateTime => h.base_timestamp.saturating_add(record.timestamp_delta),
        };
        let sequence = if h.base_sequence < 0 {
            -1
        } else {
            tarn_protocol::record_batch::increment_sequence(h.base_sequence, record.offset_delta)
        };
        let size = |b: Option<&[u8]>| b.map_or(-1, |b| b.len() as i64);
        write!(
            out,
            "| offset: {offset} {}: {timestamp} keySize: {} valueSize: {} sequence: {sequence}",
            timestamp_type_name(h),
            size(record.key),
            size(record.value)
        )?;
        if h.is_control() {
            writeln!(out, " {}", control_record(record.key))?;
            continue;
        }
        let headers: Vec<String> = record
            .headers
            .iter()
            .map(|(k, v)| {
                format!(
                    "{}={}",
                    printable(k),
                    v.map_or_else(|| "null".to_owned(), printable)
                )
            })
            .collect();
        writeln!(
            out,
            " headers: [{}] key: {} payload: {}",
            headers.join(", "),
            record.key.map_or_else(|| "null".to_owned(), printable),
            record.value.map_or_else(|| "null".to_owned(), printable)
        )?;
    }
    Ok(())
}

/// A control record's key: version (int16) and type (int16: 0 abort, 1 commit).
fn control_record(key: Option<&[u8]>) -> String {
    match key {
        Some([_, _, t0, t1, ..]) => match i16::from_be_bytes([*t0, *t1]) {
            0 => "endTxnMarker: ABORT".to_owned(),
            1 => "endTxnMarker: COMMIT".to_owned(),
            t => format!("controlType: {t}"),
        },
        _ => "controlType: unreadable".to_owned(),
    }
}

/// Index entries in absolute terms, read from a file.
struct IndexFile {
    /// (offset, position) for .index; (timestamp, offset) for .timeindex.
    entries: Vec<(i64, i64)>,
    /// Trailing all-zero entries (Kafka preallocates index files).
    zero_padding: usize,
}

fn read_index(path: &Path, kind: Kind, base_offset: i64) -> Result<IndexFile> {
    let entry_size = match kind {
        Kind::OffsetIndex => OFFSET_INDEX_ENTRY_SIZE,
        Kind::TimeIndex => TIME_INDEX_ENTRY_SIZE,
        Kind::Log => unreachable!("read_index is only called for index files"),
    };
    let bytes = std::fs::read(path).with_context(|| format!("read {}", path.display()))?;
    if bytes.len() % entry_size != 0 {
        bail!(
            "size {} is not a multiple of the {entry_size}-byte entry size",
            bytes.len()
        );
    }
    let chunks: Vec<&[u8]> = bytes.chunks_exact(entry_size).collect();
    let zero_padding = chunks
        .iter()
        .skip(1)
        .rev()
        .take_while(|c| c.iter().all(|b| *b == 0))
        .count();
    let entries = chunks[..chunks.len() - zero_padding]
        .iter()
        .map(|c| match kind {
            Kind::OffsetIndex => {
                let relative = u32::from_be_bytes(c[0..4].try_into().expect("4 bytes"));
                let position = u32::from_be_bytes(c[4..8].try_into().expect("4 bytes"));
                (base_offset + i64::from(relative), i64::from(position))
            }
            _ => {
                let timestamp = i64::from_be_bytes(c[0..8].try_into().expect("8 bytes"));
                let relative = u32::from_be_bytes(c[8..12].try_into().expect("4 bytes"));
                (timestamp, base_offset + i64::from(relative))
            }
        })
        .collect();
    Ok(IndexFile {
        entries,
        zero_padding,
    })
}

fn dump_index(path: &Path, kind: Kind, out: &mut dyn Write) -> Result<Outcome> {
    let base_offset = base_offset_of(path)?;
    let index = read_index(path, kind, base_offset)?;
    writeln!(out, "Dumping {}", path.display())?;
    for (a, b) in &index.entries {
        match kind {
            Kind::OffsetIndex => writeln!(out, "offset: {a} position: {b}")?,
            _ => writeln!(out, "timestamp: {a} offset: {b}")?,
        }
    }
    if index.zero_padding > 0 {
        writeln!(
            out,
            "({} trailing zero entries: preallocated space)",
            index.zero_padding
        )?;
    }
    Ok(Outcome::Clean)
}

/// Collects mismatches, printing the first [`MAX_MISMATCHES_SHOWN`].
struct Mismatches<'a> {
    out: &'a mut dyn Write,
    count: usize,
}

impl Mismatches<'_> {
    fn report(&mut self, message: String) -> io::Result<()> {
        self.count += 1;
        if self.count <= MAX_MISMATCHES_SHOWN {
            writeln!(self.out, "  mismatch: {message}")?;
        }
        Ok(())
    }
}

/// Checks an index against the segment beside it: every offset-index entry
/// points at the start of a batch that holds its offset, with offsets and
/// positions increasing; every time-index entry names an offset in the
/// segment whose batch has that max timestamp, with timestamps increasing
/// and offsets not decreasing.
pub fn verify_index(path: &Path, out: &mut dyn Write) -> Result<Outcome> {
    let kind = kind_of(path)?;
    let base_offset = base_offset_of(path)?;
    let log_path = path.with_extension("log");
    writeln!(
        out,
        "Verifying {} against {}",
        path.display(),
        log_path.display()
    )?;
    let index = read_index(path, kind, base_offset)?;
    let mut log = SegmentReader::open(&log_path, true)?;
    let mut m = Mismatches { out, count: 0 };
    let entries = &index.entries;
    // Ordering checks first: they need no log.
    for (i, w) in entries.windows(2).enumerate() {
        let (prev, next) = (w[0], w[1]);
        match kind {
            Kind::OffsetIndex if next.0 <= prev.0 || next.1 <= prev.1 => m.report(format!(
                "entry {} (offset {}, position {}) does not come after entry {i} (offset {}, position {})",
                i + 1, next.0, next.1, prev.0, prev.1
            ))?,
            Kind::TimeIndex if next.0 <= prev.0 => m.report(format!(
                "entry {} timestamp {} is not greater than entry {i}'s {}",
                i + 1, next.0, prev.0
            ))?,
            Kind::TimeIndex if next.1 < prev.1 => m.report(format!(
                "entry {} offset {} is below entry {i}'s {}",
                i + 1, next.1, prev.1
            ))?,
            _ => {}
        }
    }
    // Then a single pass over the segment's batch headers, matching entries
    // in file order.
    let (mut i, mut last_offset) = (0usize, base_offset - 1);
    let mut batches = 0u64;
    loop {
        let batch = match log
            .next()
            .with_context(|| format!("read {}", log_path.display()))?
        {
            Ok(Some(b)) => b,
            Ok(None) => break,
            Err(tail) => {
                writeln!(
                    m.out,
                    "  note: segment ends with invalid bytes at {}: {}",
                    tail.position, tail.reason
                )?;
                break;
            }
        };
        batches += 1;
        let h = batch.header;
        last_offset = h.last_offset();
        while i < entries.len() {
            let (a, b) = entries[i];
            match kind {
                Kind::OffsetIndex => {
                    let (offset, position) = (a, b);
                    if position > batch.position as i64 {
                        break;
                    }
                    if position < batch.position as i64 {
                        m.report(format!("entry {i} (offset {offset}) points to position {position}, which is not the start of a batch"))?;
                    } else if offset < h.base_offset || offset > h.last_offset() {
                        m.report(format!(
                            "entry {i}: index offset {offset}, but the batch at position {position} holds offsets {}..={}",
                            h.base_offset, h.last_offset()
                        ))?;
                    }
                }
                _ => {
                    let (timestamp, offset) = (a, b);
                    if offset > h.last_offset() {
                        break;
                    }
                    if offset < h.base_offset {
                        m.report(format!("entry {i}: offset {offset} is not in any batch"))?;
                    } else if timestamp != h.max_timestamp {
                        m.report(format!(
                            "entry {i}: index timestamp {timestamp} for offset {offset}, but its batch (offsets {}..={}) has max timestamp {}",
                            h.base_offset, h.last_offset(), h.max_timestamp
                        ))?;
                    }
                }
            }
            i += 1;
        }
    }
    for (j, (a, b)) in entries.iter().enumerate().skip(i) {
        match kind {
            Kind::OffsetIndex => m.report(format!(
                "entry {j} (offset {a}) points to position {b}, past the last batch (segment size {})",
                log.size
            ))?,
            _ => m.report(format!(
                "entry {j} (timestamp {a}) names offset {b}, past the segment's last offset {last_offset}"
            ))?,
        }
    }
    let count = m.count;
    if count > MAX_MISMATCHES_SHOWN {
        writeln!(
            out,
            "  ... and {} more mismatches",
            count - MAX_MISMATCHES_SHOWN
        )?;
    }
    writeln!(
        out,
        "{}: {} entries{}, {batches} batches in the segment: {}",
        path.display(),
        entries.len(),
        if index.zero_padding > 0 {
            format!(" (+{} zero padding)", index.zero_padding)
        } else {
            String::new()
        },
        if count == 0 {
            "OK".to_owned()
        } else {
            format!("{count} mismatch(es)")
        }
    )?;
    Ok(Outcome::from_count(count))
}

/// Lines of `BufRead` for tests.
#[cfg(test)]
fn lines(bytes: &[u8]) -> Vec<String> {
    use std::io::BufRead;
    bytes.lines().map(|l| l.expect("utf-8")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use tarn_protocol::record_batch::RecordBatchBuilder;

    /// A segment of three batches at offsets 100.., with an index entry for
    /// the second and third batch and time entries in Tarn's layout.
    fn write_segment(dir: &Path) -> (PathBuf, Vec<u64>) {
        let b1 = RecordBatchBuilder::new()
            .base_offset(100)
            .record(1_000, Some(b"k1"), Some(b"hello"))
            .record(1_005, None, Some(b"line\nbreak"))
            .build();
        let b2 = RecordBatchBuilder::new()
            .base_offset(102)
            .producer(7, 1, 0)
            .record_with_headers(2_000, Some(b"k"), None, &[(b"h", Some(b"v"))])
            .build();
        let b3 = RecordBatchBuilder::new()
            .base_offset(103)
            .record(1_500, None, Some(b"late"))
            .build();
        let positions = vec![0, b1.len() as u64, (b1.len() + b2.len()) as u64];
        let log = dir.join("00000000000000000100.log");
        std::fs::write(&log, [b1, b2, b3].concat()).unwrap();
        let mut index = Vec::new();
        for (offset, position) in [(102u32, positions[1] as u32), (103, positions[2] as u32)] {
            index.extend_from_slice(&(offset - 100).to_be_bytes());
            index.extend_from_slice(&position.to_be_bytes());
        }
        std::fs::write(log.with_extension("index"), index).unwrap();
        let mut time = Vec::new();
        for (ts, offset) in [(1_005i64, 0u32), (2_000, 2)] {
            time.extend_from_slice(&ts.to_be_bytes());
            time.extend_from_slice(&offset.to_be_bytes());
        }
        std::fs::write(log.with_extension("timeindex"), time).unwrap();
        (log, positions)
    }

    fn args(print_data: bool, verify_index: bool) -> DumpLogArgs {
        DumpLogArgs {
            files: vec![],
            print_data,
            verify_index,
        }
    }

    fn dump(path: &Path, a: &DumpLogArgs) -> (Outcome, Vec<String>) {
        let mut out = Vec::new();
        let outcome = dump_file(path, a, &mut out, &mut io::sink()).unwrap();
        (outcome, lines(&out))
    }

    #[test]
    fn dumps_batches_and_records() {
        let dir = tempfile::tempdir().unwrap();
        let (log, positions) = write_segment(dir.path());
        let (outcome, lines) = dump(&log, &args(true, false));
        assert_eq!(outcome, Outcome::Clean, "{lines:#?}");
        let batch_lines: Vec<&String> = lines
            .iter()
            .filter(|l| l.starts_with("baseOffset:"))
            .collect();
        assert_eq!(batch_lines.len(), 3);
        assert!(batch_lines[0].contains("baseOffset: 100 lastOffset: 101 count: 2 "));
        assert!(batch_lines[0].contains(
            "position: 0 timestampType: CreateTime baseTimestamp: 1000 maxTimestamp: 1005"
        ));
        assert!(batch_lines
            .iter()
            .all(|l| l.contains("compresscodec: none") && l.ends_with("isvalid: true")));
        assert!(batch_lines[1].contains("producerId: 7 producerEpoch: 1"));
        assert!(batch_lines[1].contains(&format!("position: {}", positions[1])));
        assert!(lines.contains(&"| offset: 100 CreateTime: 1000 keySize: 2 valueSize: 5 sequence: -1 headers: [] key: k1 payload: hello".to_owned()));
        assert!(lines.contains(&"| offset: 101 CreateTime: 1005 keySize: -1 valueSize: 10 sequence: -1 headers: [] key: null payload: line\\nbreak".to_owned()));
        assert!(lines.contains(&"| offset: 102 CreateTime: 2000 keySize: 1 valueSize: -1 sequence: 0 headers: [h=v] key: k payload: null".to_owned()));
        assert!(lines
            .last()
            .unwrap()
            .starts_with("Summary: 3 batches, 4 records"));
    }

    #[test]
    fn a_bad_crc_and_a_torn_tail_are_problems() {
        let dir = tempfile::tempdir().unwrap();
        let (log, positions) = write_segment(dir.path());
        let mut bytes = std::fs::read(&log).unwrap();
        // Flip a byte inside the second batch's records: CRC mismatch.
        let at = positions[2] as usize - 2;
        bytes[at] ^= 0xff;
        // And append half a header.
        bytes.extend_from_slice(&[0u8; 30]);
        std::fs::write(&log, bytes).unwrap();
        let (outcome, lines) = dump(&log, &args(false, false));
        assert_eq!(outcome, Outcome::Problems(2), "{lines:#?}");
        assert!(lines
            .iter()
            .any(|l| l.contains("baseOffset: 102") && l.ends_with("isvalid: false")));
        assert!(lines
            .iter()
            .any(|l| l.starts_with("Found 30 invalid bytes at the end")));
    }

    #[test]
    fn verify_index_accepts_a_good_index() {
        let dir = tempfile::tempdir().unwrap();
        let (log, _) = write_segment(dir.path());
        let (outcome, lines) = dump(&log, &args(false, true));
        assert_eq!(outcome, Outcome::Clean, "{lines:#?}");
        assert_eq!(
            lines.iter().filter(|l| l.ends_with(": OK")).count(),
            2,
            "{lines:#?}"
        );
    }

    #[test]
    fn verify_index_reports_a_corrupted_offset_index() {
        let dir = tempfile::tempdir().unwrap();
        let (log, _) = write_segment(dir.path());
        let index = log.with_extension("index");
        let mut bytes = std::fs::read(&index).unwrap();
        // Point the first entry one byte past its batch start.
        bytes[7] += 1;
        std::fs::write(&index, bytes).unwrap();
        let (outcome, lines) = dump(&index, &args(false, true));
        assert_eq!(outcome, Outcome::Problems(1), "{lines:#?}");
        assert!(
            lines.iter().any(|l| l.contains("not the start of a batch")),
            "{lines:#?}"
        );
    }

    #[test]
    fn verify_index_reports_order_and_range_problems() {
        let dir = tempfile::tempdir().unwrap();
        let (log, positions) = write_segment(dir.path());
        let index = log.with_extension("index");
        let mut bytes = Vec::new();
        // Entry 0 names offset 105 at the batch holding 102: wrong offset;
        // entry 1 goes backwards; entry 2 points past the segment.
        for (rel, pos) in [
            (5u32, positions[1] as u32),
            (3, positions[1] as u32),
            (9, 1 << 20),
        ] {
            bytes.extend_from_slice(&rel.to_be_bytes());
            bytes.extend_from_slice(&pos.to_be_bytes());
        }
        std::fs::write(&index, bytes).unwrap();
        let (outcome, lines) = dump(&index, &args(false, true));
        let Outcome::Problems(n) = outcome else {
            panic!("{lines:#?}")
        };
        assert!(n >= 3, "{lines:#?}");
        assert!(lines.iter().any(|l| l.contains("does not come after")));
        assert!(lines.iter().any(|l| l.contains("index offset 105")));
        assert!(lines.iter().any(|l| l.contains("past the last batch")));
    }

    #[test]
    fn verify_index_reports_a_wrong_time_index() {
        let dir = tempfile::tempdir().unwrap();
        let (log, _) = write_segment(dir.path());
        let time = log.with_extension("timeindex");
        let mut bytes = Vec::new();
        for (ts, rel) in [(1_004i64, 0u32), (900, 2), (3_000, 50)] {
            bytes.extend_from_slice(&ts.to_be_bytes());
            bytes.extend_from_slice(&rel.to_be_bytes());
        }
        std::fs::write(&time, bytes).unwrap();
        let (outcome, lines) = dump(&time, &args(false, true));
        let Outcome::Problems(n) = outcome else {
            panic!("{lines:#?}")
        };
        assert!(n >= 3, "{lines:#?}");
        assert!(lines.iter().any(|l| l.contains("max timestamp 1005")));
        assert!(lines.iter().any(|l| l.contains("is not greater than")));
        assert!(lines
            .iter()
            .any(|l| l.contains("past the segment's last offset")));
    }

    #[test]
    fn index_files_are_dumped_and_zero_padding_ignored() {
        let dir = tempfile::tempdir().unwrap();
        let (log, positions) = write_segment(dir.path());
        let index = log.with_extension("index");
        let mut bytes = std::fs::read(&index).unwrap();
        bytes.extend_from_slice(&[0u8; 16]);
        std::fs::write(&index, bytes).unwrap();
        let (outcome, lines) = dump(&index, &args(false, false));
        assert_eq!(outcome, Outcome::Clean);
        assert!(lines.contains(&format!("offset: 102 position: {}", positions[1])));
        assert!(lines.contains(&"(2 trailing zero entries: preallocated space)".to_owned()));
        let (outcome, _) = dump(&index, &args(false, true));
        assert_eq!(outcome, Outcome::Clean);
    }

    #[test]
    fn progress_is_reported_every_tenth_of_a_large_file() {
        let dir = tempfile::tempdir().unwrap();
        let mut data = Vec::new();
        for i in 0..50 {
            data.extend(tarn_protocol::record_batch::build_batch_for_tests(
                i * 2,
                2,
                0,
            ));
        }
        let log = dir.path().join("00000000000000000000.log");
        std::fs::write(&log, &data).unwrap();
        let mut out = Vec::new();
        let mut progress = Vec::new();
        dump_segment(&log, false, &mut out, &mut progress, 1).unwrap();
        let progress = lines(&progress);
        assert_eq!(progress.len(), 9, "{progress:#?}");
        assert!(progress[0].contains(": 10% ("));
        assert!(progress[8].contains(": 90% ("));
        // Small files stay quiet.
        let mut quiet = Vec::new();
        dump_segment(&log, false, &mut out, &mut quiet, PROGRESS_MIN_BYTES).unwrap();
        assert!(quiet.is_empty());
    }

    #[test]
    fn other_files_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("leader-epoch-checkpoint");
        std::fs::write(&path, b"0\n").unwrap();
        let mut out = Vec::new();
        assert!(dump_file(&path, &args(false, false), &mut out, &mut io::sink()).is_err());
        let bad_name = dir.path().join("abc.log");
        std::fs::write(&bad_name, b"").unwrap();
        assert!(dump_file(&bad_name, &args(false, false), &mut out, &mut io::sink()).is_err());
    }

    #[test]
    fn control_records_are_named() {
        assert_eq!(control_record(Some(&[0, 0, 0, 1])), "endTxnMarker: COMMIT");
        assert_eq!(control_record(Some(&[0, 0, 0, 0])), "endTxnMarker: ABORT");
        assert_eq!(control_record(None), "controlType: unreadable");
    }
}
