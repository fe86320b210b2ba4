//! [`InputStore`]: the object store every remote input is read through. It
//! runs each request on the reader crate's I/O runtime and counts the bytes
//! it returns (see the parent module).

use super::FETCHED;
use async_trait::async_trait;
use bytes::Bytes;
use futures::StreamExt;
use futures::stream::BoxStream;
use object_store::path::Path as ObjectPath;
use object_store::{
    CopyOptions, GetOptions, GetResult, GetResultPayload, ListResult, MultipartUpload, ObjectMeta,
    ObjectStore, ObjectStoreExt, PutMultipartOptions, PutOptions, PutPayload, PutResult,
};
use std::ops::Range;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use tokio::runtime::Runtime;

/// An object store that runs every request on the I/O runtime and counts
/// the bytes it returns.
#[derive(Debug)]
pub struct InputStore {
    pub(super) inner: Arc<dyn ObjectStore>,
    pub(super) rt: Arc<Runtime>,
    pub(super) name: String,
}

impl std::fmt::Display for InputStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "InputStore({})", self.name)
    }
}

impl InputStore {
    /// Runs `fut` on the I/O runtime and waits for it, from any thread
    /// (also one inside another runtime: blocking it is what the build's
    /// tasks do for local reads too).
    pub(super) fn blocking<T: Send + 'static>(
        &self,
        fut: impl Future<Output = object_store::Result<T>> + Send + 'static,
    ) -> object_store::Result<T> {
        let handle = self.rt.spawn(fut);
        futures::executor::block_on(handle).unwrap_or_else(|e| {
            Err(object_store::Error::Generic {
                store: "InputStore",
                source: Box::new(e),
            })
        })
    }

    pub(super) fn blocking_next(
        &self,
        stream: &mut BoxStream<'static, object_store::Result<Bytes>>,
    ) -> Option<object_store::Result<Bytes>> {
        let _guard = self.rt.enter();
        futures::executor::block_on(stream.next())
    }

    pub(super) fn head_meta(&self, key: &str) -> Result<Option<ObjectMeta>, String> {
        let inner = Arc::clone(&self.inner);
        let loc = ObjectPath::from(key);
        match self.blocking(async move { inner.head(&loc).await }) {
            Ok(m) => Ok(Some(m)),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(e.to_string()),
        }
    }

    pub(super) fn list_all(&self, prefix: &str) -> Result<Vec<ObjectMeta>, String> {
        let inner = Arc::clone(&self.inner);
        let prefix = (!prefix.is_empty()).then(|| ObjectPath::from(prefix));
        self.blocking(async move {
            let mut out = Vec::new();
            let mut s = inner.list(prefix.as_ref());
            while let Some(m) = s.next().await {
                out.push(m?);
            }
            Ok(out)
        })
        .map_err(|e| e.to_string())
    }

    /// Runs `fut` on the I/O runtime and awaits it from the caller's.
    pub(super) async fn on_io<T: Send + 'static>(
        &self,
        fut: impl Future<Output = object_store::Result<T>> + Send + 'static,
    ) -> object_store::Result<T> {
        self.rt.spawn(fut).await.unwrap_or_else(|e| {
            Err(object_store::Error::Generic {
                store: "InputStore",
                source: Box::new(e),
            })
        })
    }

    pub(super) fn read_only(&self) -> object_store::Error {
        object_store::Error::NotSupported {
            source: format!("{}: inputs are read only", self.name).into(),
        }
    }
}

#[async_trait]
impl ObjectStore for InputStore {
    async fn put_opts(
        &self,
        _location: &ObjectPath,
        _payload: PutPayload,
        _opts: PutOptions,
    ) -> object_store::Result<PutResult> {
        Err(self.read_only())
    }

    async fn put_multipart_opts(
        &self,
        _location: &ObjectPath,
        _opts: PutMultipartOptions,
    ) -> object_store::Result<Box<dyn MultipartUpload>> {
        Err(self.read_only())
    }

    async fn get_opts(
        &self,
        location: &ObjectPath,
        options: GetOptions,
    ) -> object_store::Result<GetResult> {
        let inner = Arc::clone(&self.inner);
        let loc = location.clone();
        let head = options.head;
        let r = self
            .on_io(async move { inner.get_opts(&loc, options).await })
            .await?;
        if head {
            return Ok(r);
        }
        let GetResult {
            payload,
            meta,
            range,
            attributes,
        } = r;
        let GetResultPayload::Stream(mut body) = payload else {
            return Err(object_store::Error::NotImplemented {
                operation: "a file payload from a remote store".into(),
                implementer: self.name.clone(),
            });
        };
        // The body is polled on the I/O runtime and handed over through a
        // small channel, so the caller's runtime never drives the socket.
        let (mut tx, rx) = futures::channel::mpsc::channel::<object_store::Result<Bytes>>(4);
        self.rt.spawn(async move {
            use futures::SinkExt;
            while let Some(chunk) = body.next().await {
                if let Ok(b) = &chunk {
                    FETCHED.fetch_add(b.len() as u64, Ordering::Relaxed);
                }
                if tx.send(chunk).await.is_err() {
                    break;
                }
            }
        });
        Ok(GetResult {
            payload: GetResultPayload::Stream(rx.boxed()),
            meta,
            range,
            attributes,
        })
    }

    async fn get_ranges(
        &self,
        location: &ObjectPath,
        ranges: &[Range<u64>],
    ) -> object_store::Result<Vec<Bytes>> {
        let inner = Arc::clone(&self.inner);
        let loc = location.clone();
        let ranges = ranges.to_vec();
        let out = self
            .on_io(async move { inner.get_ranges(&loc, &ranges).await })
            .await?;
        let n: usize = out.iter().map(Bytes::len).sum();
        FETCHED.fetch_add(n as u64, Ordering::Relaxed);
        Ok(out)
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, object_store::Result<ObjectPath>>,
    ) -> BoxStream<'static, object_store::Result<ObjectPath>> {
        let err = self.read_only();
        locations
            .map(move |_| {
                Err(object_store::Error::NotSupported {
                    source: err.to_string().into(),
                })
            })
            .boxed()
    }

    fn list(
        &self,
        prefix: Option<&ObjectPath>,
    ) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        let inner = Arc::clone(&self.inner);
        let prefix = prefix.cloned();
        let fut = self.rt.spawn(async move {
            let mut out = Vec::new();
            let mut s = inner.list(prefix.as_ref());
            while let Some(m) = s.next().await {
                out.push(m);
            }
            out
        });
        futures::stream::once(fut)
            .flat_map(|r| {
                futures::stream::iter(r.unwrap_or_else(|e| {
                    vec![Err(object_store::Error::Generic {
                        store: "InputStore",
                        source: Box::new(e),
                    })]
                }))
            })
            .boxed()
    }

    async fn list_with_delimiter(
        &self,
        prefix: Option<&ObjectPath>,
    ) -> object_store::Result<ListResult> {
        let inner = Arc::clone(&self.inner);
        let prefix = prefix.cloned();
        self.on_io(async move { inner.list_with_delimiter(prefix.as_ref()).await })
            .await
    }

    async fn copy_opts(
        &self,
        _from: &ObjectPath,
        _to: &ObjectPath,
        _options: CopyOptions,
    ) -> object_store::Result<()> {
        Err(self.read_only())
    }
}
