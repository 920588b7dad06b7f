// Copyright 2019 Octavian Oncescu

#![no_std]

//! A drop-in global allocator wrapper around the [mimalloc](https://github.com/microsoft/mimalloc) allocator.
//! Mimalloc is a general purpose, performance oriented allocator built by Microsoft.
//!
//! ## Usage
//! ```rust,ignore
//! use mimalloc::MiMalloc;
//!
//! #[global_allocator]
//! static GLOBAL: MiMalloc = MiMalloc;
//! ```
//!
//! ## Usage with secure mode
//! Using secure mode adds guard pages,
//! randomized allocation, encrypted free lists, etc. The performance penalty is usually
//! around 10% according to [mimalloc's](https://github.com/microsoft/mimalloc)
//! own benchmarks.
//!
//! To enable secure mode, put in `Cargo.toml`:
//! ```toml
//! [dependencies]
//! mimalloc = { version = "*", features = ["secure"] }
//! ```

extern crate libmimalloc_sys as ffi;

#[cfg(feature = "extended")]
mod extended;

use core::alloc::{GlobalAlloc, Layout};
use core::ffi::c_void;
use ffi::*;

/// Drop-in mimalloc global allocator.
///
/// ## Usage
/// ```rust,ignore
/// use mimalloc::MiMalloc;
///
/// #[global_allocator]
/// static GLOBAL: MiMalloc = MiMalloc;
/// ```
pub struct MiMalloc;

/// The alignment every block of mimalloc's plain `mi_malloc` has when its
/// size is a multiple of it (`MI_MAX_ALIGN_SIZE`): every size class is a
/// multiple of 8 bytes, and of 16 above 16, and a page's first block is
/// 16-aligned (`MI_PAGE_MIN_START_BLOCK_ALIGN`).
const PLAIN_ALIGN: usize = 16;

/// Whether a plain (unaligned) call already gives `layout`'s alignment.
///
/// mimalloc 3's aligned calls take the plain path only for blocks of a
/// power-of-two size. Any other size, once its size class's page has no
/// free block at hand, goes to the over-allocating fallback (a block of
/// the next class, with a detour through the generic path), though every
/// block of its own class was aligned enough: Rust asks with an
/// alignment on every call, so most of a program's allocations took
/// that detour.
#[inline]
fn plain(align: usize, size: usize) -> bool {
    align <= PLAIN_ALIGN && size % align == 0
}

unsafe impl GlobalAlloc for MiMalloc {
    #[inline]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if plain(layout.align(), layout.size()) {
            mi_malloc(layout.size()) as *mut u8
        } else {
            mi_malloc_aligned(layout.size(), layout.align()) as *mut u8
        }
    }

    #[inline]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if plain(layout.align(), layout.size()) {
            mi_zalloc(layout.size()) as *mut u8
        } else {
            mi_zalloc_aligned(layout.size(), layout.align()) as *mut u8
        }
    }

    #[inline]
    unsafe fn dealloc(&self, ptr: *mut u8, _layout: Layout) {
        mi_free(ptr as *mut c_void);
    }

    #[inline]
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if plain(layout.align(), new_size) {
            mi_realloc(ptr as *mut c_void, new_size) as *mut u8
        } else {
            mi_realloc_aligned(ptr as *mut c_void, new_size, layout.align()) as *mut u8
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every layout a plain call serves comes back aligned, however the
    /// size classes' pages fill: many blocks of each, held at once.
    #[test]
    fn plain_calls_give_the_alignment_asked() {
        let alloc = MiMalloc;
        for align in [1usize, 2, 4, 8, 16] {
            for size in (align..=4096).step_by(align) {
                let layout = Layout::from_size_align(size, align).unwrap();
                let mut held = [core::ptr::null_mut(); 64];
                for (i, slot) in held.iter_mut().enumerate() {
                    let ptr = unsafe {
                        if i % 2 == 0 {
                            alloc.alloc(layout)
                        } else {
                            alloc.alloc_zeroed(layout)
                        }
                    };
                    assert!(!ptr.is_null());
                    assert_eq!(ptr as usize % align, 0, "size {size} align {align}");
                    if i % 2 == 1 {
                        assert!(unsafe { core::slice::from_raw_parts(ptr, size) }
                            .iter()
                            .all(|b| *b == 0));
                    }
                    *slot = ptr;
                }
                for ptr in held {
                    unsafe { alloc.dealloc(ptr, layout) };
                }
            }
        }
    }

    /// A block grown or shrunk keeps its bytes and its alignment.
    #[test]
    fn plain_reallocs_keep_bytes_and_alignment() {
        let alloc = MiMalloc;
        for align in [8usize, 16] {
            let layout = Layout::from_size_align(align * 3, align).unwrap();
            unsafe {
                let mut ptr = alloc.alloc(layout);
                for i in 0..layout.size() {
                    *ptr.add(i) = i as u8;
                }
                let mut size = layout.size();
                for new_size in [align * 5, align * 64, align * 1000, align * 2] {
                    ptr =
                        alloc.realloc(ptr, Layout::from_size_align(size, align).unwrap(), new_size);
                    assert_eq!(ptr as usize % align, 0);
                    for i in 0..layout.size().min(new_size) {
                        assert_eq!(*ptr.add(i), i as u8);
                    }
                    size = new_size;
                }
                alloc.dealloc(ptr, Layout::from_size_align(size, align).unwrap());
            }
        }
    }

    /// A block the aligned calls made (its size not a multiple of its
    /// alignment) and a plain `realloc` resizes, in place or moved, keeps
    /// its bytes and its alignment; and the other way round.
    #[test]
    fn reallocs_between_the_two_paths_keep_bytes_and_alignment() {
        let alloc = MiMalloc;
        // (size, align) → new size: aligned path to plain, plain to aligned.
        for (size, align, new_size) in [
            (40usize, 16usize, 48usize),
            (40, 16, 4096),
            (48, 16, 72),
            (4096, 16, 40),
        ] {
            let layout = Layout::from_size_align(size, align).unwrap();
            assert_ne!(plain(align, size), plain(align, new_size));
            unsafe {
                let ptr = alloc.alloc(layout);
                assert_eq!(ptr as usize % align, 0);
                for i in 0..size {
                    *ptr.add(i) = i as u8;
                }
                let moved = alloc.realloc(ptr, layout, new_size);
                assert!(!moved.is_null());
                assert_eq!(moved as usize % align, 0, "{size} -> {new_size} at {align}");
                for i in 0..size.min(new_size) {
                    assert_eq!(*moved.add(i), i as u8);
                }
                alloc.dealloc(moved, Layout::from_size_align(new_size, align).unwrap());
            }
        }
    }

    #[test]
    fn which_layouts_take_the_plain_calls() {
        assert!(plain(8, 24));
        assert!(plain(8, 40));
        assert!(plain(16, 48));
        assert!(plain(1, 3));
        assert!(!plain(16, 40));
        assert!(!plain(32, 64));
        assert!(!plain(4096, 4096));
    }

    #[test]
    fn it_frees_allocated_memory() {
        unsafe {
            let layout = Layout::from_size_align(8, 8).unwrap();
            let alloc = MiMalloc;

            let ptr = alloc.alloc(layout);
            alloc.dealloc(ptr, layout);
        }
    }

    #[test]
    fn it_frees_allocated_big_memory() {
        unsafe {
            let layout = Layout::from_size_align(1 << 20, 32).unwrap();
            let alloc = MiMalloc;

            let ptr = alloc.alloc(layout);
            alloc.dealloc(ptr, layout);
        }
    }

    #[test]
    fn it_frees_zero_allocated_memory() {
        unsafe {
            let layout = Layout::from_size_align(8, 8).unwrap();
            let alloc = MiMalloc;

            let ptr = alloc.alloc_zeroed(layout);
            alloc.dealloc(ptr, layout);
        }
    }

    #[test]
    fn it_frees_zero_allocated_big_memory() {
        unsafe {
            let layout = Layout::from_size_align(1 << 20, 32).unwrap();
            let alloc = MiMalloc;

            let ptr = alloc.alloc_zeroed(layout);
            alloc.dealloc(ptr, layout);
        }
    }

    #[test]
    fn it_frees_reallocated_memory() {
        unsafe {
            let layout = Layout::from_size_align(8, 8).unwrap();
            let alloc = MiMalloc;

            let ptr = alloc.alloc(layout);
            let ptr = alloc.realloc(ptr, layout, 16);
            alloc.dealloc(ptr, layout);
        }
    }

    #[test]
    fn it_frees_reallocated_big_memory() {
        unsafe {
            let layout = Layout::from_size_align(1 << 20, 32).unwrap();
            let alloc = MiMalloc;

            let ptr = alloc.alloc(layout);
            let ptr = alloc.realloc(ptr, layout, 2 << 20);
            alloc.dealloc(ptr, layout);
        }
    }
}
