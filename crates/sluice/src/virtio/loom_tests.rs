//! Loom models of the split virtqueue's index publication and of the
//! notification handshake.
//!
//! Under loom a guest memory mapping is a loom cell per byte and a loom
//! atomic per 2-byte word (see [`memory`](super::memory)), so a model fails
//! when a side reads a descriptor, ring entry or buffer byte that the other
//! side wrote without a happens-before edge between the two: an entry seen
//! through the index but not yet complete is caught, not merely unlikely.
//!
//! The queues are of size 2 on 96 bytes of memory, one chain each way, and
//! each polling loop gives up after a few attempts (loom explores unfair
//! schedules, in which a poller could run for ever); the checks then hold
//! for whatever got through.
//!
//! Run with
//! `RUSTFLAGS="--cfg loom" cargo test -p sluice --release --lib virtio::loom`.

use loom::thread;

use super::memory::{GuestMemory, Mapping};
use super::split::*;
use super::*;
use crate::sync::Arc;
use crate::test_support::loom_model;

/// The request buffer (after the rings of a size-2 queue at 0).
const REQUEST: u64 = 72;
/// The reply buffer.
const REPLY: u64 = 80;
/// Polls before a side gives up.
const ATTEMPTS: usize = 3;

fn setup(features: u64) -> (Arc<GuestMemory>, DriverQueue, DeviceQueue) {
    let mem = Arc::new(GuestMemory::new(vec![(0, Mapping::anonymous(96).unwrap())]).unwrap());
    let layout = QueueLayout::contiguous(0, 2).unwrap();
    assert!(layout.end() <= REQUEST);
    let driver = DriverQueue::new(Arc::clone(&mem), layout, features).unwrap();
    let device = DeviceQueue::new(Arc::clone(&mem), layout, features).unwrap();
    (mem, driver, device)
}

/// The driver offers a request chain; the device takes it, checks the
/// request, writes a reply and returns the chain; the driver reclaims it and
/// reads the reply. Loom checks every byte read against the writes before
/// it: the descriptor and ring entry after `avail.idx`, the used entry and
/// the reply after `used.idx`.
#[test]
fn a_chain_and_its_reply_are_seen_complete_after_the_index() {
    loom_model(|| {
        let (mem, mut driver, mut device) = setup(0);
        let device_mem = Arc::clone(&mem);
        let device_thread = thread::spawn(move || {
            for _ in 0..ATTEMPTS {
                if let Some(chain) = device.pop_avail().unwrap() {
                    let mut request = [0u8; 4];
                    assert_eq!(chain.read(&device_mem, 0, &mut request).unwrap(), 4);
                    assert_eq!(&request, b"ping");
                    assert_eq!(chain.write(&device_mem, 0, b"pong").unwrap(), 4);
                    device.push_used(chain.head(), 4).unwrap();
                    device.publish_used().unwrap();
                    return true;
                }
                thread::yield_now();
            }
            false
        });

        mem.write_from(REQUEST, b"ping").unwrap();
        let head = driver
            .add_chain(&[
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
            ])
            .unwrap();
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
            assert_eq!(used, Used { head, len: 4 });
            let mut reply = [0u8; 4];
            mem.read_into(REPLY, &mut reply).unwrap();
            assert_eq!(&reply, b"pong");
            assert_eq!(driver.num_free(), 2);
        }
    });
}

/// The kick handshake with `VIRTIO_F_EVENT_IDX`: the device, polling with
/// `avail_event` left behind, asks to be kicked again and re-reads the
/// index, while the driver publishes a chain and reads `avail_event`. With
/// the fences on both sides, at least one of them sees the other: the
/// driver kicks, or the device sees the chain — never neither (a lost
/// wake-up).
#[test]
fn a_kick_is_never_lost() {
    loom_model(|| {
        let (_mem, mut driver, mut device) =
            setup(feature(VIRTIO_F_EVENT_IDX) | feature(VIRTIO_F_VERSION_1));
        // A stale event index: the driver would not kick for entry 0.
        device.set_avail_event(5).unwrap();
        let device_thread = thread::spawn(move || device.enable_notify().unwrap());
        driver
            .add_chain(&[Segment {
                addr: REQUEST,
                len: 4,
                writable: false,
            }])
            .unwrap();
        driver.publish_avail().unwrap();
        let kick = driver.needs_kick().unwrap();
        let pending = device_thread.join().unwrap();
        assert!(kick || pending, "the chain is neither kicked nor seen");
    });
}
