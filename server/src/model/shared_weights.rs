//! One copy of a graph's weights for several sessions of it.
//!
//! Each ONNX Runtime session loads its graph's weights for itself, and repacks those
//! of its matrix products for itself: a second session of MiniLM-L6 costs 44 MiB.
//! The batcher runs a large batch as parts side by side, one session each (see
//! `batcher::MIN_SPLIT_SEQUENCES`), so here the graph's external data file is mapped
//! once, every session gets its weights as initializers pointing into the mapping
//! (ONNX Runtime uses them in place), and the sessions share one container of
//! repacked weights (ONNX Runtime's `PrepackedWeightsContainer`, which caches the
//! repacked versions of shared initializers only). Once the sessions are ready the
//! mapped pages are dropped from memory ([`SharedWeights::drop_resident_pages`]): the
//! matrix products use their repacked copies, and what the runs still read (token
//! embeddings, biases, norms) comes back from the page cache when read.

use std::collections::HashMap;
use std::ffi::CStr;
use std::fs::File;
use std::path::Path;
use std::ptr::NonNull;
use std::sync::Arc;

use bytes::Bytes;
use memmap2::MmapOptions;
use ort::AsPointer;
use ort::memory::{Allocator, MemoryInfo};
use ort::session::builder::{PrepackedWeights, SessionBuilder};
use ort::value::{DynValue, Tensor, TensorElementType};
use prost::Message;

use crate::error::{Error, Result};

/// The initializers of one graph, shared by the sessions opened with them. Sessions
/// opened with it must be dropped before it (they read the mapped files).
pub struct SharedWeights {
    initializers: Vec<(String, Arc<DynValue>)>,
    prepacked: PrepackedWeights,
    /// The graph and its external data files, mapped copy-on-write: initializers
    /// point into them.
    mapped: Vec<Bytes>,
}

impl std::fmt::Debug for SharedWeights {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedWeights").field("initializers", &self.initializers.len()).finish()
    }
}

// SAFETY: the values are immutable tensors read by sessions on any thread, the maps
// are read-only once built.
unsafe impl Send for SharedWeights {}
unsafe impl Sync for SharedWeights {}

impl SharedWeights {
    /// Maps the external data of the graph at `graph` and reads its inline
    /// initializers. Initializers of an element type no tensor here holds stay in the
    /// graph: each session loads those itself.
    pub fn read(graph: &Path) -> Result<SharedWeights> {
        // Mapped, and decoded without copying: inline weights (all of an int8 graph's)
        // stay slices of the mapping.
        let graph_bytes = map_file(graph)?;
        let model = ModelProto::decode(graph_bytes.clone())
            .map_err(|e| Error::Config(format!("{}: not an ONNX model: {e}", graph.display())))?;
        let directory = graph.parent().unwrap_or(Path::new("."));
        let mut files = ExternalFiles { directory, mapped: HashMap::new() };
        let mut initializers = Vec::new();
        for tensor in model.graph.map(|g| g.initializer).unwrap_or_default() {
            let Some(element) = element_type(tensor.data_type) else { continue };
            let data = match tensor.external_data.is_empty() {
                true if tensor.raw_data.is_empty() => continue, // typed fields: small constants, left to the graph
                true => tensor.raw_data.clone(),
                false => files.locate(&tensor)?,
            };
            let value = mapped_tensor(&tensor, element, &data)?;
            initializers.push((tensor.name, Arc::new(value)));
        }
        let mut mapped: Vec<Bytes> = files.mapped.into_values().collect();
        mapped.push(graph_bytes);
        Ok(SharedWeights { initializers, prepacked: PrepackedWeights::new(), mapped })
    }

    /// Gives `builder` the shared initializers and the shared repacked weights.
    pub(super) fn apply(&self, builder: SessionBuilder) -> ort::Result<SessionBuilder> {
        let mut builder = builder.with_prepacked_weights(&self.prepacked)?;
        for (name, value) in &self.initializers {
            builder = builder.with_initializer(name, value.clone())?;
        }
        Ok(builder)
    }

    /// Drops the mapped pages from this process' memory (they stay in the page cache);
    /// a later read maps them back. Call it when the sessions are loaded and warm.
    pub fn drop_resident_pages(&self) {
        for map in &self.mapped {
            // SAFETY: MADV_DONTNEED on a private file mapping that nobody wrote only
            // unmaps pages; reading them again faults them in from the file.
            unsafe { libc::madvise(map.as_ptr() as *mut libc::c_void, map.len(), libc::MADV_DONTNEED) };
        }
    }
}

/// The tensor element type of ONNX's `TensorProto.DataType` number, for the types
/// shared.
fn element_type(data_type: i32) -> Option<(TensorElementType, usize)> {
    Some(match data_type {
        1 => (TensorElementType::Float32, 4),
        2 => (TensorElementType::Uint8, 1),
        3 => (TensorElementType::Int8, 1),
        6 => (TensorElementType::Int32, 4),
        7 => (TensorElementType::Int64, 8),
        11 => (TensorElementType::Float64, 8),
        _ => return None,
    })
}

/// Checks that `bytes` bytes hold the tensor's elements.
fn check_size(tensor: &TensorProto, (_, size): (TensorElementType, usize), bytes: usize) -> Result<()> {
    let elements: i64 = tensor.dims.iter().product();
    match elements >= 0 && bytes as i64 == elements * size as i64 {
        true => Ok(()),
        false => Err(Error::Config(format!("initializer {}: {bytes} bytes for {elements} elements", tensor.name))),
    }
}

/// A tensor over `data`, inside a mapped file: no copy (a copy when `data` is not
/// aligned for its element type, as inline weights in the graph may not be).
fn mapped_tensor(tensor: &TensorProto, element: (TensorElementType, usize), data: &[u8]) -> Result<DynValue> {
    check_size(tensor, element, data.len())?;
    if !(data.as_ptr() as usize).is_multiple_of(element.1) {
        return owned_tensor_from(tensor, element, data);
    }
    let failed = |why: String| Error::Config(format!("initializer {}: {why}", tensor.name));
    let info = MemoryInfo::default();
    let mut value: *mut ort::sys::OrtValue = std::ptr::null_mut();
    // SAFETY: `data` lives in a mapping that outlives every session given this value
    // (see SharedWeights); the shape matches its length (checked above).
    let status = unsafe {
        (ort::api().CreateTensorWithDataAsOrtValue)(
            info.ptr(),
            data.as_ptr() as *mut std::ffi::c_void,
            data.len(),
            tensor.dims.as_ptr(),
            tensor.dims.len(),
            element.0.into(),
            &mut value,
        )
    };
    if !status.0.is_null() {
        // SAFETY: a non-null status is an error with a message; released once read.
        let message = unsafe {
            let message = CStr::from_ptr((ort::api().GetErrorMessage)(status.0)).to_string_lossy().into_owned();
            (ort::api().ReleaseStatus)(status.0);
            message
        };
        return Err(failed(message));
    }
    let value = NonNull::new(value).ok_or_else(|| failed("ONNX Runtime made no tensor".into()))?;
    // SAFETY: a tensor just created over memory ONNX Runtime does not own; releasing
    // the value leaves the data alone.
    Ok(unsafe { DynValue::from_ptr(value, Some(&Allocator::default())) })
}

/// A tensor holding a copy of `data`: for weights not aligned for their type.
fn owned_tensor_from(tensor: &TensorProto, element: (TensorElementType, usize), data: &[u8]) -> Result<DynValue> {
    let shape = tensor.dims.clone();
    macro_rules! typed {
        ($t:ty) => {{
            let values: Vec<$t> = data
                .chunks_exact(std::mem::size_of::<$t>())
                .map(|b| <$t>::from_le_bytes(b.try_into().expect("chunk size")))
                .collect();
            Tensor::from_array((shape, values)).map(|t| t.into_dyn())
        }};
    }
    let value = match element.0 {
        TensorElementType::Float32 => typed!(f32),
        TensorElementType::Uint8 => typed!(u8),
        TensorElementType::Int8 => typed!(i8),
        TensorElementType::Int32 => typed!(i32),
        TensorElementType::Int64 => typed!(i64),
        _ => typed!(f64),
    };
    value.map_err(|e| Error::Config(format!("initializer {}: {e}", tensor.name)))
}

/// The external data files of a graph, mapped once each.
struct ExternalFiles<'a> {
    directory: &'a Path,
    mapped: HashMap<String, Bytes>,
}

impl ExternalFiles<'_> {
    /// The bytes of `tensor` in its external file (`location`, `offset`, `length`):
    /// a slice of the file's mapping.
    fn locate(&mut self, tensor: &TensorProto) -> Result<Bytes> {
        let failed = |why: String| Error::Config(format!("initializer {}: {why}", tensor.name));
        let entry = |key: &str| tensor.external_data.iter().find(|e| e.key == key).map(|e| e.value.as_str());
        let location = entry("location").ok_or_else(|| failed("external data without a location".into()))?;
        let number = |key: &str| entry(key).map(|v| v.parse::<usize>()).transpose();
        let (Ok(offset), Ok(length)) = (number("offset"), number("length")) else {
            return Err(failed("external data with a bad offset or length".into()));
        };
        if !self.mapped.contains_key(location) {
            self.mapped.insert(location.to_string(), map_file(&self.directory.join(location))?);
        }
        let map = &self.mapped[location];
        let offset = offset.unwrap_or(0);
        let end = length.map_or(map.len(), |length| offset.saturating_add(length));
        if offset > end || end > map.len() {
            return Err(failed(format!("external data {offset}..{end} past the end of {location}")));
        }
        Ok(map.slice(offset..end))
    }
}

/// The file at `path`, mapped privately.
fn map_file(path: &Path) -> Result<Bytes> {
    File::open(path)
        // SAFETY: a private mapping of a model file nobody rewrites while it runs.
        .and_then(|file| unsafe { MmapOptions::new().map_copy_read_only(&file) })
        .map(Bytes::from_owner)
        .map_err(|e| Error::Config(format!("mapping {}: {e}", path.display())))
}

// The few fields of ONNX's protobuf schema (onnx.proto) that name the initializers.

#[derive(Clone, PartialEq, Message)]
struct ModelProto {
    #[prost(message, optional, tag = "7")]
    graph: Option<GraphProto>,
}

#[derive(Clone, PartialEq, Message)]
struct GraphProto {
    #[prost(message, repeated, tag = "5")]
    initializer: Vec<TensorProto>,
}

#[derive(Clone, PartialEq, Message)]
struct TensorProto {
    #[prost(int64, repeated, tag = "1")]
    dims: Vec<i64>,
    #[prost(int32, tag = "2")]
    data_type: i32,
    #[prost(string, tag = "8")]
    name: String,
    #[prost(bytes = "bytes", tag = "9")]
    raw_data: Bytes,
    #[prost(message, repeated, tag = "13")]
    external_data: Vec<StringStringEntryProto>,
}

#[derive(Clone, PartialEq, Message)]
struct StringStringEntryProto {
    #[prost(string, tag = "1")]
    key: String,
    #[prost(string, tag = "2")]
    value: String,
}
