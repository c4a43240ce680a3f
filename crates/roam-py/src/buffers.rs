//! Borrowing keys and values from Python objects without copying.
//!
//! Everything that exposes the buffer protocol (NumPy arrays, `memoryview`, `array.array`, ...)
//! is used in place; an object that only exposes `__dlpack__` (on the CPU) is first viewed as a
//! NumPy array with `numpy.from_dlpack`, which shares its memory. Values must be `float32` and
//! C-contiguous (any shape; the elements are taken in C order). Keys are used in place when they
//! are C-contiguous 64-bit integers (`uint64`, or `int64`, whose bits are reinterpreted: a negative
//! key is then out of range and reported as itself); other integer arrays and Python sequences of
//! `int` are converted.
//!
//! A [`PyBuffer`] is a buffer *export*: while it lives, the exporting object cannot be freed and
//! refuses to resize its memory (NumPy's `resize`, `bytearray` and `array.array` growth all raise
//! `BufferError` while exported). That is what makes the raw slices below valid for as long as
//! the `PyBuffer` is held, also while the GIL is released.

use std::ffi::CStr;
use std::ptr::NonNull;

use parking_lot::Mutex;
use pyo3::buffer::{ElementType, PyBuffer, PyUntypedBuffer};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyModule, PyString};

static NUMPY: PyOnceLock<Py<PyModule>> = PyOnceLock::new();

/// The `numpy` module.
pub(crate) fn numpy(py: Python<'_>) -> PyResult<&Bound<'_, PyModule>> {
    NUMPY
        .get_or_try_init(py, || py.import("numpy").map(Bound::unbind))
        .map(|m| m.bind(py))
}

/// A new, uninitialised NumPy array of `shape` and `dtype` (a NumPy dtype name).
pub(crate) fn numpy_empty<'py>(
    py: Python<'py>,
    shape: impl IntoPyObject<'py>,
    dtype: &str,
) -> PyResult<Bound<'py, PyAny>> {
    let np = numpy(py)?;
    let kwargs = PyDict::new(py);
    kwargs.set_item("dtype", np.getattr(dtype)?)?;
    np.call_method("empty", (shape,), Some(&kwargs))
}

/// The element type of a buffer format, if its byte order is this machine's.
fn element_type(format: &CStr) -> ElementType {
    match format.to_bytes() {
        [b'>' | b'!', _] if cfg!(target_endian = "little") => ElementType::Unknown,
        [b'<', _] if cfg!(target_endian = "big") => ElementType::Unknown,
        _ => ElementType::from_format(format),
    }
}

fn format_name(format: &CStr) -> String {
    match element_type(format) {
        ElementType::SignedInteger { bytes } => format!("int{}", bytes * 8),
        ElementType::UnsignedInteger { bytes } => format!("uint{}", bytes * 8),
        ElementType::Float { bytes } => format!("float{}", bytes * 8),
        ElementType::Bool => "bool".to_owned(),
        ElementType::Unknown => format!("format {:?}", format.to_string_lossy()),
    }
}

/// A buffer export of `obj`, or of `numpy.from_dlpack(obj)` for a DLPack-only object; `None` if
/// `obj` exposes neither.
fn export(obj: &Bound<'_, PyAny>) -> PyResult<Option<PyUntypedBuffer>> {
    if let Ok(buf) = PyUntypedBuffer::get(obj) {
        return Ok(Some(buf));
    }
    if obj.hasattr("__dlpack__")? {
        // A zero-copy NumPy view of the tensor; fails (with the producer's message) for a
        // tensor that is not on the CPU.
        let view = numpy(obj.py())?.call_method1("from_dlpack", (obj,))?;
        return PyUntypedBuffer::get(&view).map(Some);
    }
    Ok(None)
}

fn type_name(obj: &Bound<'_, PyAny>) -> String {
    obj.get_type()
        .name()
        .map_or_else(|_| "?".to_owned(), |n| n.to_string())
}

/// A `float32` buffer borrowed from a Python object.
pub(crate) struct F32Buffer {
    buf: PyBuffer<f32>,
}

impl F32Buffer {
    /// Borrows `obj` (named `what` in errors) as C-contiguous `float32` values; `writable`
    /// additionally requires a writable buffer.
    pub(crate) fn get(obj: &Bound<'_, PyAny>, what: &str, writable: bool) -> PyResult<Self> {
        let Some(buf) = export(obj)? else {
            return Err(PyTypeError::new_err(format!(
                "{what} must be a float32 array (a NumPy array, or an object with the buffer \
                 protocol or __dlpack__ on the CPU), not {}",
                type_name(obj)
            )));
        };
        if element_type(buf.format()) != (ElementType::Float { bytes: 4 }) {
            return Err(PyTypeError::new_err(format!(
                "{what} must hold float32 values, not {} (convert with \
                 numpy.asarray(..., dtype=numpy.float32))",
                format_name(buf.format())
            )));
        }
        if !buf.is_c_contiguous() {
            return Err(PyValueError::new_err(format!(
                "{what} must be C-contiguous (use numpy.ascontiguousarray)"
            )));
        }
        if writable && buf.readonly() {
            return Err(PyValueError::new_err(format!(
                "{what} is read-only; roam writes the pulled values into it"
            )));
        }
        let buf = buf.into_typed::<f32>().map_err(|e| {
            PyValueError::new_err(format!("{what} cannot be used as float32 values: {e}"))
        })?;
        Ok(Self { buf })
    }

    /// Number of `f32` values.
    pub(crate) fn len(&self) -> usize {
        self.buf.item_count()
    }

    /// The byte range of the values (`None` if empty).
    fn byte_range(&self) -> Option<(usize, usize)> {
        let start = self.ptr().as_ptr() as usize;
        (self.len() > 0).then(|| (start, start + self.len() * std::mem::size_of::<f32>()))
    }

    /// Fails if the values overlap the output of a pending pull.
    pub(crate) fn check_unpinned(&self, what: &str) -> PyResult<()> {
        check_unpinned(self.byte_range(), what)
    }

    fn ptr(&self) -> NonNull<f32> {
        // Checked C-contiguous at construction; a zero-length buffer may have a null pointer.
        self.buf
            .as_slice_ptr()
            .map_or(NonNull::dangling(), NonNull::cast)
    }

    /// The values.
    ///
    /// # Safety
    /// The caller must not let the slice outlive `self`, and must not create a mutable slice of
    /// the same buffer while this one lives. Other Python code may still write the memory
    /// concurrently (the documented contract forbids it; it can only make values wrong).
    pub(crate) unsafe fn as_slice<'a>(&self) -> &'a [f32] {
        // SAFETY: the export keeps `len()` contiguous, aligned (checked by `into_typed`) f32
        // values alive and in place; the caller bounds the lifetime.
        unsafe { std::slice::from_raw_parts(self.ptr().as_ptr(), self.len()) }
    }

    /// The values, for writing.
    ///
    /// # Safety
    /// As for [`F32Buffer::as_slice`]; additionally the buffer must have been obtained with
    /// `writable` and no other slice of it may exist while this one lives.
    pub(crate) unsafe fn as_mut_slice<'a>(&self) -> &'a mut [f32] {
        // SAFETY: as in `as_slice`; the buffer is writable (checked at construction).
        unsafe { std::slice::from_raw_parts_mut(self.ptr().as_ptr(), self.len()) }
    }
}

/// A writable `uint64` buffer that roam fills: the keys of a sample, in an array the binding
/// has just created (so no pending pull's output can overlap it).
pub(crate) struct U64Out {
    buf: PyBuffer<u64>,
}

impl U64Out {
    /// Borrows `obj`, a writable C-contiguous `uint64` array.
    pub(crate) fn get(obj: &Bound<'_, PyAny>) -> PyResult<Self> {
        let buf = PyBuffer::<u64>::get(obj)?;
        if !buf.is_c_contiguous() || buf.readonly() {
            return Err(PyValueError::new_err(
                "a sample's keys must be a writable, C-contiguous uint64 array",
            ));
        }
        Ok(Self { buf })
    }

    /// The keys, for writing.
    ///
    /// # Safety
    /// The caller must not let the slice outlive `self`, and no other slice of the same buffer
    /// may exist while this one lives.
    pub(crate) unsafe fn as_mut_slice<'a>(&self) -> &'a mut [u64] {
        let len = self.buf.item_count();
        let ptr = self
            .buf
            .as_slice_ptr()
            .map_or(NonNull::dangling(), NonNull::cast);
        // SAFETY: the export keeps `len` contiguous, aligned (checked by `PyBuffer::get`), writable
        // u64 values alive and in place; the caller bounds the lifetime and excludes aliases.
        unsafe { std::slice::from_raw_parts_mut(ptr.as_ptr(), len) }
    }
}

/// Keys borrowed from, or converted from, a Python object.
pub(crate) enum Keys {
    /// A contiguous 64-bit integer buffer used in place.
    Borrowed {
        /// The export (of `uint64` or `int64` elements).
        buf: PyUntypedBuffer,
        /// Whether the elements are signed (`int64`).
        signed: bool,
    },
    /// Converted keys (negative ones wrapped to huge `u64`s, which are out of range).
    Owned {
        /// The keys.
        keys: Vec<u64>,
        /// Whether the input was signed.
        signed: bool,
    },
}

impl Keys {
    /// Reads `obj` as keys: a buffer / `__dlpack__` object of integers, or a sequence of `int`.
    pub(crate) fn get(obj: &Bound<'_, PyAny>) -> PyResult<Self> {
        if let Some(buf) = export(obj)? {
            return Self::from_buffer(obj.py(), buf);
        }
        if obj.is_instance_of::<PyString>() || obj.extract::<i64>().is_ok() {
            return Err(Self::type_error(obj));
        }
        let Ok(iter) = obj.try_iter() else {
            return Err(Self::type_error(obj));
        };
        let (lower, _) = iter.size_hint();
        let mut keys = Vec::with_capacity(lower);
        let mut signed = false;
        for item in iter {
            let item = item?;
            if let Ok(k) = item.extract::<i64>() {
                signed |= k < 0;
                keys.push(k as u64);
            } else if let Ok(k) = item.extract::<u64>() {
                keys.push(k);
            } else {
                return Err(PyTypeError::new_err(format!(
                    "keys must be integers, not {}",
                    type_name(&item)
                )));
            }
        }
        Ok(Self::Owned { keys, signed })
    }

    fn type_error(obj: &Bound<'_, PyAny>) -> PyErr {
        PyTypeError::new_err(format!(
            "keys must be a uint64 array (or int64, or a sequence of int), not {}",
            type_name(obj)
        ))
    }

    fn from_buffer(py: Python<'_>, buf: PyUntypedBuffer) -> PyResult<Self> {
        let contiguous = buf.is_c_contiguous();
        match element_type(buf.format()) {
            ElementType::UnsignedInteger { bytes: 8 } | ElementType::SignedInteger { bytes: 8 }
                if contiguous && buf.item_size() == 8 =>
            {
                let signed = matches!(
                    element_type(buf.format()),
                    ElementType::SignedInteger { .. }
                );
                // Checks alignment (the format is known to be compatible).
                if signed {
                    buf.as_typed::<i64>()?;
                } else {
                    buf.as_typed::<u64>()?;
                }
                Ok(Self::Borrowed { buf, signed })
            }
            ElementType::UnsignedInteger { bytes } => {
                let keys = match bytes {
                    1 => widen(py, buf, |k: u8| u64::from(k))?,
                    2 => widen(py, buf, |k: u16| u64::from(k))?,
                    4 => widen(py, buf, |k: u32| u64::from(k))?,
                    _ => widen(py, buf, |k: u64| k)?,
                };
                Ok(Self::Owned {
                    keys,
                    signed: false,
                })
            }
            ElementType::SignedInteger { bytes } => {
                let keys = match bytes {
                    1 => widen(py, buf, |k: i8| k as u64)?,
                    2 => widen(py, buf, |k: i16| k as u64)?,
                    4 => widen(py, buf, |k: i32| k as u64)?,
                    _ => widen(py, buf, |k: i64| k as u64)?,
                };
                Ok(Self::Owned { keys, signed: true })
            }
            _ => Err(PyTypeError::new_err(format!(
                "keys must be integers (uint64 for zero-copy), not {}",
                format_name(buf.format())
            ))),
        }
    }

    /// The byte range of borrowed keys (`None` if converted or empty).
    fn byte_range(&self) -> Option<(usize, usize)> {
        match self {
            Self::Borrowed { buf, .. } if buf.item_count() > 0 => {
                let start = buf.buf_ptr() as usize;
                Some((start, start + buf.item_count() * 8))
            }
            _ => None,
        }
    }

    /// Fails if borrowed keys overlap the output of a pending pull.
    pub(crate) fn check_unpinned(&self) -> PyResult<()> {
        check_unpinned(self.byte_range(), "keys")
    }

    /// Whether negative keys may have been given (see [`crate::errors::access_error`]).
    pub(crate) fn signed(&self) -> bool {
        match self {
            Self::Borrowed { signed, .. } | Self::Owned { signed, .. } => *signed,
        }
    }

    /// The keys.
    pub(crate) fn as_slice(&self) -> &[u64] {
        match self {
            Self::Owned { keys, .. } => keys,
            Self::Borrowed { buf, .. } => {
                let len = buf.item_count();
                if len == 0 {
                    return &[];
                }
                // SAFETY: `from_buffer` checked that the export holds `len` C-contiguous, 8-byte,
                // 8-aligned integers, which are valid `u64` bit patterns whether signed or not;
                // the export keeps them alive and in place for as long as `self` (which bounds
                // the returned lifetime) lives. Concurrent writes by other Python code are
                // excluded by the documented contract (and could only produce wrong keys,
                // which are range-checked).
                unsafe { std::slice::from_raw_parts(buf.buf_ptr().cast::<u64>(), len) }
            }
        }
    }
}

fn widen<T: pyo3::buffer::Element>(
    py: Python<'_>,
    buf: PyUntypedBuffer,
    f: impl Fn(T) -> u64,
) -> PyResult<Vec<u64>> {
    let typed = buf.into_typed::<T>()?;
    Ok(typed.to_vec(py)?.into_iter().map(f).collect())
}

/// Byte ranges of the outputs of pending pulls, process-wide. A pending pull writes into its
/// output until it is waited, so no other access may touch that memory meanwhile: another
/// pull's output, keys or values overlapping it are refused (`ValueError`) instead of creating
/// aliasing references. (Python code itself is bound by the documented contract.)
static PINNED: Mutex<Vec<(usize, usize)>> = Mutex::new(Vec::new());

fn overlaps(a: (usize, usize), b: (usize, usize)) -> bool {
    a.0 < b.1 && b.0 < a.1
}

fn check_unpinned(range: Option<(usize, usize)>, what: &str) -> PyResult<()> {
    let Some(range) = range else {
        return Ok(());
    };
    if PINNED.lock().iter().any(|&p| overlaps(p, range)) {
        return Err(pinned_error(what));
    }
    Ok(())
}

fn pinned_error(what: &str) -> PyErr {
    PyValueError::new_err(format!(
        "{what} overlaps the output array of a pending pull; wait for that pull first"
    ))
}

/// A pull's output buffer, registered in [`PINNED`] until dropped; the pull owns it.
pub(crate) struct PinnedOut {
    buf: F32Buffer,
    range: Option<(usize, usize)>,
}

impl PinnedOut {
    /// Pins `buf` as the output of a pull of `keys`: fails if it overlaps the keys or the
    /// output of a pending pull.
    pub(crate) fn new(buf: F32Buffer, keys: &Keys) -> PyResult<Self> {
        if buf.buf.readonly() {
            return Err(PyValueError::new_err("out is read-only"));
        }
        let range = buf.byte_range();
        if let (Some(r), Some(k)) = (range, keys.byte_range())
            && overlaps(r, k)
        {
            return Err(PyValueError::new_err("out overlaps keys"));
        }
        if let Some(range) = range {
            let mut pinned = PINNED.lock();
            if pinned.iter().any(|&p| overlaps(p, range)) {
                return Err(pinned_error("out"));
            }
            pinned.push(range);
        }
        Ok(Self { buf, range })
    }
}

/// The pulled values are written through this, by the pull that owns the `PinnedOut`: local
/// keys' values at issue, remote ones when the pull is waited.
impl AsMut<[f32]> for PinnedOut {
    fn as_mut(&mut self) -> &mut [f32] {
        // SAFETY: the export `buf` keeps the memory alive and in place for as long as `self`,
        // which bounds the slice's lifetime; it was obtained writable (`new` requires it). No
        // other Rust slice of this memory exists meanwhile: the slice is borrowed from `&mut
        // self`, and while `self` lives its range is pinned, so keys, values and other pulls'
        // outputs that overlap it are refused before any slice of them is made.
        unsafe { self.buf.as_mut_slice() }
    }
}

impl Drop for PinnedOut {
    fn drop(&mut self) {
        if let Some(range) = self.range {
            let mut pinned = PINNED.lock();
            if let Some(i) = pinned.iter().position(|&p| p == range) {
                pinned.swap_remove(i);
            }
        }
    }
}
