// TEMPORARY: replaced by the storage helper's follower API at merge.
use bytes::Bytes;
use tarn_protocol::records::FileRegion;

use crate::{AppendError, AppendInfo, Log, StorageError};

impl Log {
    pub fn append_as_follower(&mut self, _records: &[u8]) -> Result<AppendInfo, AppendError> {
        todo!("follower append")
    }
    pub fn truncate_to(&mut self, _offset: i64) -> Result<(), StorageError> {
        todo!("truncate")
    }
    pub fn truncate_fully_and_start_at(&mut self, _offset: i64) -> Result<(), StorageError> {
        todo!("truncate fully")
    }
    pub fn read_upto(
        &self,
        fetch_offset: i64,
        max_bytes: usize,
        min_one_batch: bool,
        _max_offset: i64,
    ) -> Result<Bytes, StorageError> {
        self.read(fetch_offset, max_bytes, min_one_batch)
    }
    pub fn read_region_upto(
        &self,
        fetch_offset: i64,
        max_bytes: usize,
        min_one_batch: bool,
        _max_offset: i64,
    ) -> Result<Option<FileRegion>, StorageError> {
        self.read_region(fetch_offset, max_bytes, min_one_batch)
    }
}
