//! Loom models of the packed virtqueue's publication by descriptor flags
//! and of its notification handshake.
//!
//! Under loom a guest memory mapping is a loom cell per byte and a loom
//! atomic per 2-byte word (see [`memory`](super::memory)), so a model fails
//! when a side reads a descriptor or buffer byte that the other side wrote
//! without a happens-before edge between the two. The last two models show
//! that this catches a weakened publication: a side storing the flags word
//! with Relaxed instead of Release makes the model fail.
//!
//! The queues are of size 2 on 64 bytes of memory, and each polling loop
//! gives up after a few attempts (loom explores unfair schedules, in which
//! a poller could run for ever); the checks then hold for whatever got
//! through.
//!
//! Run with
//! `RUSTFLAGS="--cfg loom" cargo test -p sluice --release --lib virtio::packed_loom`.

use loom::thread;

use super::memory::{GuestMemory, Mapping};
use super::packed::*;
use super::split::{Segment, Used};
use super::*;
use crate::sync::{Arc, Ordering};
use crate::test_support::loom_model;

/// The request buffer (after the ring and event structures of a size-2
/// queue at 0).
const REQUEST: u64 = 48;
/// The reply buffer.
const REPLY: u64 = 56;
/// Polls before a side gives up.
const ATTEMPTS: usize = 3;

fn setup() -> (Arc<GuestMemory>, PackedLayout) {
    let mem = Arc::new(GuestMemory::new(vec![(0, Mapping::anonymous(64).unwrap())]).unwrap());
    let layout = PackedLayout::contiguous(0, 2).unwrap();
    assert!(layout.end() <= REQUEST);
    (mem, layout)
}

fn request_chain() -> [Segment; 2] {
    [
        Segment {
            addr: REQUEST,
            len: 4,
            writable: false,
        },
        Segment {
            addr: REPLY,
            len: 4,
            writable: true,
        },
    ]
}

/// The device side: takes the request chain, checks the request, writes
/// the reply, returns the chain. True when it got the chain.
fn serve(device: &mut PackedDeviceQueue, mem: &GuestMemory) -> bool {
    for _ in 0..ATTEMPTS {
        if let Some(chain) = device.pop_avail().unwrap() {
            let mut request = [0u8; 4];
            assert_eq!(chain.read(mem, 0, &mut request).unwrap(), 4);
            assert_eq!(&request, b"ping");
            assert_eq!(chain.write(mem, 0, b"pong").unwrap(), 4);
            device.push_used(chain.id(), chain.descs(), 4).unwrap();
            device.publish_used().unwrap();
            return true;
        }
        thread::yield_now();
    }
    false
}

/// The driver offers a two-descriptor request chain; the device takes it,
/// checks the request, writes a reply and returns the chain in place; the
/// driver reclaims it and reads the reply. Loom checks every byte read
/// against the writes before it: both descriptors and the request after
/// the head's flags, the used `id` and `len` and the reply after the used
/// flags.
#[test]
fn a_chain_and_its_reply_are_seen_complete_after_the_flags() {
    loom_model(|| {
        let (mem, layout) = setup();
        let mut driver = PackedDriverQueue::new(Arc::clone(&mem), layout, 0).unwrap();
        let mut device = PackedDeviceQueue::new(Arc::clone(&mem), layout, 0).unwrap();
        let device_mem = Arc::clone(&mem);
        let device_thread = thread::spawn(move || serve(&mut device, &device_mem));

        mem.write_from(REQUEST, b"ping").unwrap();
        let id = driver.add_chain(&request_chain()).unwrap();
        driver.publish_avail().unwrap();
        let mut used = None;
        for _ in 0..ATTEMPTS {
            used = driver.pop_used().unwrap();
            if used.is_some() {
                break;
            }
            thread::yield_now();
        }
        let served = device_thread.join().unwrap();
        if used.is_none() {
            // Everything the device did happens before the join.
            used = driver.pop_used().unwrap();
        }
        assert_eq!(used.is_some(), served, "returned exactly when served");
        if let Some(used) = used {
            assert_eq!(used, Used { head: id, len: 4 });
            let mut reply = [0u8; 4];
            mem.read_into(REPLY, &mut reply).unwrap();
            assert_eq!(&reply, b"pong");
            assert_eq!(driver.num_free(), 2);
        }
    });
}

/// The kick handshake with `VIRTIO_F_EVENT_IDX`: the device, polling with
/// its event left behind, asks to be kicked at its position and re-reads
/// the descriptor there, while the driver publishes a chain and reads the
/// device's event structure. With the fences on both sides at least one
/// of them sees the other: the driver kicks, or the device sees the chain.
#[test]
fn a_kick_is_never_lost() {
    loom_model(|| {
        let features = feature(VIRTIO_F_EVENT_IDX) | feature(VIRTIO_F_VERSION_1);
        let (mem, layout) = setup();
        let mut driver = PackedDriverQueue::new(Arc::clone(&mem), layout, features).unwrap();
        let mut device = PackedDeviceQueue::new(Arc::clone(&mem), layout, features).unwrap();
        // A stale event: the driver would not kick for position 0.
        device
            .set_kick_event(RingPosition {
                index: 1,
                wrap: true,
            })
            .unwrap();
        let device_thread = thread::spawn(move || device.enable_notify().unwrap());
        driver.add_chain(&request_chain()[..1]).unwrap();
        driver.publish_avail().unwrap();
        let kick = driver.needs_kick().unwrap();
        let pending = device_thread.join().unwrap();
        assert!(kick || pending, "the chain is neither kicked nor seen");
    });
}

/// The used buffer notification handshake: the driver asks for a
/// notification at its used position and re-reads it, while the device
/// returns a chain and reads the driver's event structure.
#[test]
fn a_used_notification_is_never_lost() {
    loom_model(|| {
        let features = feature(VIRTIO_F_EVENT_IDX) | feature(VIRTIO_F_VERSION_1);
        let (mem, layout) = setup();
        let mut driver = PackedDriverQueue::new(Arc::clone(&mem), layout, features).unwrap();
        let mut device = PackedDeviceQueue::new(Arc::clone(&mem), layout, features).unwrap();
        driver.add_chain(&request_chain()[..1]).unwrap();
        driver.publish_avail().unwrap();
        driver.disable_interrupts().unwrap();
        let chain = device.pop_avail().unwrap().unwrap();
        let driver_thread = thread::spawn(move || driver.enable_interrupts().unwrap());
        device.push_used(chain.id(), chain.descs(), 0).unwrap();
        device.publish_used().unwrap();
        let notify = device.needs_notify().unwrap();
        let pending = driver_thread.join().unwrap();
        assert!(
            notify || pending,
            "the used chain is neither notified nor seen"
        );
    });
}

/// A driver that publishes its descriptor with a Relaxed flags store — the
/// Release of `PackedDriverQueue` weakened — is caught: the device's
/// Acquire load can read the flags without the descriptor's bytes
/// happening before, and loom fails the model on that read.
#[test]
#[should_panic(expected = "Causality violation")]
fn a_relaxed_available_flags_store_is_caught() {
    loom_model(|| {
        let (mem, layout) = setup();
        let mut device = PackedDeviceQueue::new(Arc::clone(&mem), layout, 0).unwrap();
        let device_thread = thread::spawn(move || {
            for _ in 0..ATTEMPTS {
                if device.pop_avail().unwrap().is_some() {
                    return;
                }
                thread::yield_now();
            }
        });
        let body = PackedDescriptor {
            addr: REQUEST,
            len: 4,
            id: 0,
            flags: 0,
        }
        .to_bytes();
        mem.write_from(layout.desc(0), &body[..14]).unwrap();
        mem.store_u16(layout.desc_flags(0), avail_marking(true), Ordering::Relaxed)
            .unwrap();
        device_thread.join().unwrap();
    });
}

/// A device that returns a chain with a Relaxed used flags store — the
/// Release of `PackedDeviceQueue` weakened — is caught the same way when
/// the driver reads the used `len` and `id`.
#[test]
#[should_panic(expected = "Causality violation")]
fn a_relaxed_used_flags_store_is_caught() {
    loom_model(|| {
        let (mem, layout) = setup();
        let mut driver = PackedDriverQueue::new(Arc::clone(&mem), layout, 0).unwrap();
        let mut device = PackedDeviceQueue::new(Arc::clone(&mem), layout, 0).unwrap();
        driver.add_chain(&request_chain()[..1]).unwrap();
        driver.publish_avail().unwrap();
        let chain = device.pop_avail().unwrap().unwrap();
        let device_mem = Arc::clone(&mem);
        let device_thread = thread::spawn(move || {
            let mut raw = [0u8; 6];
            raw[4..].copy_from_slice(&chain.id().to_le_bytes());
            device_mem.write_from(layout.desc(0) + 8, &raw).unwrap();
            device_mem
                .store_u16(layout.desc_flags(0), used_marking(true), Ordering::Relaxed)
                .unwrap();
        });
        for _ in 0..ATTEMPTS {
            if driver.pop_used().unwrap().is_some() {
                break;
            }
            thread::yield_now();
        }
        device_thread.join().unwrap();
    });
}
