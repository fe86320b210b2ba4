//! Local files for DataFusion, read in the calling thread.
//!
//! object_store's `LocalFileSystem` hands every read to tokio's blocking
//! pool, which costs two thread switches per read. A build task runs its own
//! single-threaded runtime on its own thread, so blocking there is what we
//! want: reading in place makes a scan of many small files (several reads
//! each) several times cheaper in CPU. Everything but reads is delegated.

use async_trait::async_trait;
use bytes::Bytes;
use futures::stream::BoxStream;
use object_store::local::LocalFileSystem;
use object_store::path::Path;
use object_store::{
    Attributes, CopyOptions, GetOptions, GetResult, GetResultPayload, ListResult, MultipartUpload,
    ObjectMeta, ObjectStore, PutMultipartOptions, PutOptions, PutPayload, PutResult, Result,
};
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::ops::Range;

/// `LocalFileSystem` with synchronous reads.
#[derive(Debug, Default)]
pub struct InlineLocalStore {
    inner: LocalFileSystem,
}

impl std::fmt::Display for InlineLocalStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "InlineLocalStore")
    }
}

fn io_error(path: &std::path::Path, source: std::io::Error) -> object_store::Error {
    if source.kind() == std::io::ErrorKind::NotFound {
        object_store::Error::NotFound {
            path: path.display().to_string(),
            source: Box::new(source),
        }
    } else {
        object_store::Error::Generic {
            store: "InlineLocalStore",
            source: Box::new(source),
        }
    }
}

fn read_range(file: &mut File, path: &std::path::Path, r: &Range<u64>) -> Result<Bytes> {
    let len = usize::try_from(r.end.saturating_sub(r.start)).map_err(|e| {
        object_store::Error::Generic {
            store: "InlineLocalStore",
            source: Box::new(e),
        }
    })?;
    let mut buf = vec![0u8; len];
    file.seek(SeekFrom::Start(r.start))
        .map_err(|e| io_error(path, e))?;
    file.read_exact(&mut buf).map_err(|e| io_error(path, e))?;
    Ok(Bytes::from(buf))
}

#[async_trait]
impl ObjectStore for InlineLocalStore {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> Result<PutResult> {
        self.inner.put_opts(location, payload, opts).await
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> Result<Box<dyn MultipartUpload>> {
        self.inner.put_multipart_opts(location, opts).await
    }

    async fn get_opts(&self, location: &Path, options: GetOptions) -> Result<GetResult> {
        let path = self.inner.path_to_filesystem(location)?;
        let mut file = File::open(&path).map_err(|e| io_error(&path, e))?;
        let md = file.metadata().map_err(|e| io_error(&path, e))?;
        let meta = ObjectMeta {
            location: location.clone(),
            last_modified: md
                .modified()
                .map(chrono::DateTime::<chrono::Utc>::from)
                .unwrap_or_default(),
            size: md.len(),
            e_tag: None,
            version: None,
        };
        options.check_preconditions(&meta)?;
        let range = match &options.range {
            Some(r) => r
                .as_range(meta.size)
                .map_err(|e| object_store::Error::Generic {
                    store: "InlineLocalStore",
                    source: Box::new(e),
                })?,
            None => 0..meta.size,
        };
        let data = if options.head {
            Bytes::new()
        } else {
            read_range(&mut file, &path, &range)?
        };
        let stream: BoxStream<'static, Result<Bytes>> =
            Box::pin(futures::stream::once(async move { Ok(data) }));
        Ok(GetResult {
            payload: GetResultPayload::Stream(stream),
            meta,
            range,
            attributes: Attributes::default(),
        })
    }

    async fn get_ranges(&self, location: &Path, ranges: &[Range<u64>]) -> Result<Vec<Bytes>> {
        let path = self.inner.path_to_filesystem(location)?;
        let mut file = File::open(&path).map_err(|e| io_error(&path, e))?;
        ranges
            .iter()
            .map(|r| read_range(&mut file, &path, r))
            .collect()
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, Result<Path>>,
    ) -> BoxStream<'static, Result<Path>> {
        self.inner.delete_stream(locations)
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, Result<ObjectMeta>> {
        self.inner.list(prefix)
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> Result<ListResult> {
        self.inner.list_with_delimiter(prefix).await
    }

    async fn copy_opts(&self, from: &Path, to: &Path, options: CopyOptions) -> Result<()> {
        self.inner.copy_opts(from, to, options).await
    }
}
