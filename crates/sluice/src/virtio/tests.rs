//! Tests of the split virtqueue: layout against literal bytes, a driver and
//! a device moving chains (in one thread and across two), malformed chains,
//! bad used entries, notification suppression, and random operation
//! sequences against a model.

use std::collections::VecDeque;
use std::sync::Arc;

use proptest::prelude::*;

use super::memory::{GuestMemory, Mapping};
use super::split::*;
use super::*;
use crate::sync::Ordering;

/// Where the test memory starts (not 0, so translation is exercised).
const BASE: u64 = 0x10_0000;
/// Its length.
const MEM_LEN: usize = 1 << 20;
/// Where the rings go.
const RINGS: u64 = BASE;
/// Where indirect tables go.
const TABLES: u64 = BASE + 0x4_0000;
/// Where buffers go.
const DATA: u64 = BASE + 0x8_0000;

fn memory() -> Arc<GuestMemory> {
    Arc::new(GuestMemory::new(vec![(BASE, Mapping::anonymous(MEM_LEN).unwrap())]).unwrap())
}

/// A driver and a device on one fresh memory, with the rings at [`RINGS`].
fn queues(size: u32, features: u64) -> (Arc<GuestMemory>, DriverQueue, DeviceQueue) {
    let mem = memory();
    let layout = QueueLayout::contiguous(RINGS, size).unwrap();
    let driver = DriverQueue::new(Arc::clone(&mem), layout, features).unwrap();
    let device = DeviceQueue::new(Arc::clone(&mem), layout, features).unwrap();
    (mem, driver, device)
}

fn readable(addr: u64, len: u32) -> Segment {
    Segment {
        addr,
        len,
        writable: false,
    }
}

fn writable(addr: u64, len: u32) -> Segment {
    Segment {
        addr,
        len,
        writable: true,
    }
}

fn bytes(mem: &GuestMemory, gpa: u64, len: usize) -> Vec<u8> {
    let mut out = vec![0; len];
    mem.read_into(gpa, &mut out).unwrap();
    out
}

#[test]
fn descriptor_bytes_are_the_specifications() {
    let desc = Descriptor {
        addr: 0x0102_0304_0506_0708,
        len: 0x1122_3344,
        flags: VIRTQ_DESC_F_NEXT | VIRTQ_DESC_F_WRITE,
        next: 0xabcd,
    };
    let raw = [
        0x08, 0x07, 0x06, 0x05, 0x04, 0x03, 0x02, 0x01, // addr
        0x44, 0x33, 0x22, 0x11, // len
        0x03, 0x00, // flags
        0xcd, 0xab, // next
    ];
    assert_eq!(desc.to_bytes(), raw);
    assert_eq!(Descriptor::from_bytes(raw), desc);
}

#[test]
fn layout_places_the_areas_as_the_specification_sizes_them() {
    let layout = QueueLayout::contiguous(0x1000, 4).unwrap();
    assert_eq!(layout.size(), 4);
    assert_eq!(layout.desc_table(), 0x1000);
    assert_eq!(layout.desc(3), 0x1030);
    assert_eq!(layout.avail_ring(), 0x1040, "16 * 4 bytes of descriptors");
    assert_eq!(layout.avail_idx(), 0x1042);
    assert_eq!(layout.avail_entry(5), 0x1046, "entry 5 is slot 1");
    assert_eq!(layout.used_event(), 0x104c);
    assert_eq!(layout.used_ring(), 0x1050, "6 + 2 * 4 bytes, 4-aligned");
    assert_eq!(layout.used_idx(), 0x1052);
    assert_eq!(layout.used_entry(6), 0x1054 + 16, "entry 6 is slot 2");
    assert_eq!(layout.avail_event(), 0x1074);
    assert_eq!(layout.end(), 0x1076, "6 + 8 * 4 bytes of used ring");
    assert_eq!(QueueLayout::desc_table_len(256), 4096);
    assert_eq!(QueueLayout::avail_ring_len(256), 518);
    assert_eq!(QueueLayout::used_ring_len(256), 2054);
}

#[test]
fn queue_sizes_and_alignment_are_checked() {
    for bad in [0, 3, 6, 32769, 65536, u32::MAX] {
        assert_eq!(
            check_queue_size(bad),
            Err(VirtioError::BadQueueSize(bad)),
            "{bad}"
        );
    }
    for good in [1, 2, 256, 32768] {
        assert_eq!(check_queue_size(good), Ok(good as u16));
    }
    assert_eq!(
        QueueLayout::new(8, 0x1008, 0x2000, 0x3000),
        Err(VirtioError::Misaligned {
            gpa: 0x1008,
            align: 16
        })
    );
    assert!(QueueLayout::new(8, 0x1000, 0x2001, 0x3000).is_err());
    assert!(QueueLayout::new(8, 0x1000, 0x2000, 0x3002).is_err());
    assert!(QueueLayout::new(8, u64::MAX - 15, 0x2000, 0x3000).is_err());
    // Areas outside guest memory: neither side starts.
    let mem = memory();
    let outside = QueueLayout::new(8, 0x1000, BASE, BASE + 0x100).unwrap();
    assert!(DeviceQueue::new(Arc::clone(&mem), outside, 0).is_err());
    assert!(DriverQueue::new(Arc::clone(&mem), outside, 0).is_err());
    let past_end = QueueLayout::contiguous(BASE + MEM_LEN as u64 - 64, 8).unwrap();
    assert!(DeviceQueue::new(mem, past_end, 0).is_err());
}

#[test]
fn rings_in_memory_hold_the_literal_bytes() {
    let (mem, mut driver, mut device) = queues(4, feature(VIRTIO_F_VERSION_1));
    let layout = *driver.layout();
    let head = driver
        .add_chain(&[readable(0x12_3400, 0x10), writable(0x12_3500, 0x20)])
        .unwrap();
    assert_eq!(head, 0);
    // Nothing is visible before the index store.
    assert_eq!(bytes(&mem, layout.avail_idx(), 2), [0, 0]);
    driver.publish_avail().unwrap();
    #[rustfmt::skip]
    let table = [
        0x00, 0x34, 0x12, 0, 0, 0, 0, 0,  0x10, 0, 0, 0,  0x01, 0x00,  0x01, 0x00,
        0x00, 0x35, 0x12, 0, 0, 0, 0, 0,  0x20, 0, 0, 0,  0x02, 0x00,  0x00, 0x00,
    ];
    assert_eq!(bytes(&mem, layout.desc_table(), 32), table);
    // flags 0, idx 1, ring[0] = head 0.
    assert_eq!(bytes(&mem, layout.avail_ring(), 6), [0, 0, 1, 0, 0, 0]);

    let chain = device.pop_avail().unwrap().unwrap();
    assert_eq!(
        chain.segments(),
        [readable(0x12_3400, 0x10), writable(0x12_3500, 0x20)]
    );
    assert_eq!((chain.readable_len(), chain.writable_len()), (0x10, 0x20));
    device.push_used(chain.head(), 0x1c).unwrap();
    assert_eq!(
        bytes(&mem, layout.used_idx(), 2),
        [0, 0],
        "not yet published"
    );
    device.publish_used().unwrap();
    // flags 0, idx 1, ring[0] = (id 0, len 0x1c).
    assert_eq!(
        bytes(&mem, layout.used_ring(), 12),
        [0, 0, 1, 0, 0, 0, 0, 0, 0x1c, 0, 0, 0]
    );
    assert_eq!(
        driver.pop_used().unwrap(),
        Some(Used { head: 0, len: 0x1c })
    );
    assert_eq!(driver.num_free(), 4);
}

#[test]
fn chain_reads_and_writes_across_buffers_from_an_offset() {
    let (mem, mut driver, mut device) = queues(8, 0);
    mem.write_from(DATA, b"hello").unwrap();
    mem.write_from(DATA + 0x100, b" world!").unwrap();
    driver
        .add_chain(&[
            readable(DATA, 5),
            readable(DATA + 0x100, 7),
            writable(DATA + 0x200, 3),
            writable(DATA + 0x300, 4),
        ])
        .unwrap();
    driver.publish_avail().unwrap();
    let chain = device.pop_avail().unwrap().unwrap();
    let mut all = [0u8; 20];
    assert_eq!(chain.read(&mem, 0, &mut all).unwrap(), 12);
    assert_eq!(&all[..12], b"hello world!");
    let mut part = [0u8; 4];
    assert_eq!(chain.read(&mem, 3, &mut part).unwrap(), 4);
    assert_eq!(&part, b"lo w");
    assert_eq!(chain.read(&mem, 12, &mut part).unwrap(), 0);
    assert_eq!(chain.write(&mem, 1, b"abcdefgh").unwrap(), 6);
    assert_eq!(bytes(&mem, DATA + 0x200, 3), b"\0ab");
    assert_eq!(bytes(&mem, DATA + 0x300, 4), b"cdef");
}

#[test]
fn indirect_tables_carry_long_chains_in_one_descriptor() {
    let features = feature(VIRTIO_F_VERSION_1) | feature(VIRTIO_F_INDIRECT_DESC);
    let (mem, mut driver, mut device) = queues(4, features);
    let segments: Vec<Segment> = (0..3)
        .map(|i| readable(DATA + 0x100 * i, 8))
        .chain([writable(DATA + 0x1000, 64)])
        .collect();
    let head = driver.add_indirect(TABLES, &segments).unwrap();
    assert_eq!(driver.num_free(), 3, "one descriptor for four buffers");
    driver.publish_avail().unwrap();
    let chain = device.pop_avail().unwrap().unwrap();
    assert_eq!((chain.head(), chain.segments()), (head, &segments[..]));
    device.push_used(head, 64).unwrap();
    device.publish_used().unwrap();
    assert_eq!(driver.pop_used().unwrap(), Some(Used { head, len: 64 }));
    assert_eq!(driver.num_free(), 4);
    // Not negotiated: refused on the driver side.
    let (_mem, mut plain, _) = queues(4, 0);
    assert_eq!(
        plain.add_indirect(TABLES, &segments),
        Err(VirtioError::IndirectNotNegotiated)
    );
    drop(mem);
}

#[test]
fn the_driver_refuses_bad_chains_before_writing_anything() {
    let (mem, mut driver, _device) = queues(4, 0);
    assert_eq!(driver.add_chain(&[]), Err(VirtioError::EmptyChain));
    assert_eq!(
        driver.add_chain(&[writable(DATA, 4), readable(DATA, 4)]),
        Err(VirtioError::ReadableAfterWritable)
    );
    assert!(matches!(
        driver.add_chain(&[readable(0x10, 4)]),
        Err(VirtioError::OutsideMemory { .. })
    ));
    let five = [readable(DATA, 1); 5];
    assert_eq!(
        driver.add_chain(&five),
        Err(VirtioError::NoFreeDescriptors { need: 5, free: 4 })
    );
    assert_eq!(driver.num_free(), 4);
    assert_eq!(driver.in_flight(), 0);
    assert_eq!(bytes(&mem, driver.layout().desc_table(), 64), [0; 64]);
}

/// The device side of an in-order exchange: takes each chain, checks the
/// tagged request in its readable buffer, writes the reply into its
/// writable buffer, returns it; publishes when the ring is empty.
fn serve(device: &mut DeviceQueue, mem: &GuestMemory, chain: &mut Chain) -> Option<u64> {
    if !device.pop_avail_into(chain).unwrap() {
        device.publish_used().unwrap();
        return None;
    }
    let mut request = [0u8; 16];
    assert_eq!(chain.read(mem, 0, &mut request).unwrap(), 16);
    let seq = u64::from_le_bytes(request[..8].try_into().unwrap());
    assert_eq!(request[8..], tag(seq).to_le_bytes(), "request {seq} intact");
    let len = chain.write(mem, 0, &reply(seq)).unwrap() as u32;
    device.push_used(chain.head(), len).unwrap();
    Some(seq)
}

/// A word derived from `seq`, so that a torn or stale buffer is caught.
fn tag(seq: u64) -> u64 {
    let mut x = seq ^ 0x9e37_79b9_7f4a_7c15;
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x ^ (x >> 31)
}

fn reply(seq: u64) -> [u8; 16] {
    let mut r = [0u8; 16];
    r[..8].copy_from_slice(&(!seq).to_le_bytes());
    r[8..].copy_from_slice(&tag(!seq).to_le_bytes());
    r
}

/// The driver side of an in-order exchange: a request in each chain and
/// (for two chains of three) a writable buffer for the reply.
///
/// The chains in flight are consecutive sequence numbers, at most the queue
/// size of them (each takes a descriptor), so `seq mod size` gives each a
/// 64-byte slot of its own; a slot is written again only once its last
/// chain is back.
struct Requester {
    size: u64,
    /// Per head: the sequence number of the chain in flight there.
    seq_of_head: Vec<u64>,
    next_seq: u64,
    next_back: u64,
}

impl Requester {
    fn new(size: u16) -> Requester {
        Requester {
            size: u64::from(size),
            seq_of_head: vec![u64::MAX; usize::from(size)],
            next_seq: 0,
            next_back: 0,
        }
    }

    fn slot(&self, seq: u64) -> u64 {
        DATA + 64 * (seq % self.size)
    }

    /// Adds chains while descriptors are free, up to `total`; publishes.
    fn offer(&mut self, driver: &mut DriverQueue, mem: &GuestMemory, total: u64) {
        while self.next_seq < total {
            let seq = self.next_seq;
            let with_reply = !seq.is_multiple_of(3);
            if driver.num_free() < 1 + u16::from(with_reply) {
                break;
            }
            let at = self.slot(seq);
            let mut request = [0u8; 16];
            request[..8].copy_from_slice(&seq.to_le_bytes());
            request[8..].copy_from_slice(&tag(seq).to_le_bytes());
            mem.write_from(at, &request).unwrap();
            mem.write_from(at + 32, &[0; 16]).unwrap();
            let mut segments = vec![readable(at, 16)];
            if with_reply {
                segments.push(writable(at + 32, 16));
            }
            let head = driver.add_chain(&segments).unwrap();
            assert_eq!(self.seq_of_head[usize::from(head)], u64::MAX, "head in use");
            self.seq_of_head[usize::from(head)] = seq;
            self.next_seq += 1;
        }
        driver.publish_avail().unwrap();
    }

    /// Reclaims what came back, checking order and replies.
    fn reclaim(&mut self, driver: &mut DriverQueue, mem: &GuestMemory) {
        while let Some(used) = driver.pop_used().unwrap() {
            let seq = std::mem::replace(&mut self.seq_of_head[usize::from(used.head)], u64::MAX);
            assert_eq!(seq, self.next_back, "chains come back once, in order");
            if seq.is_multiple_of(3) {
                assert_eq!(used.len, 0);
            } else {
                assert_eq!(used.len, 16);
                assert_eq!(
                    bytes(mem, self.slot(seq) + 32, 16),
                    reply(seq),
                    "reply {seq}"
                );
            }
            self.next_back += 1;
        }
    }
}

/// Queue sizes and chain counts of the exchanges: 10^5 chains in all; the
/// last run passes 65536, so the 16-bit indices wrap.
const RUNS: [(u32, u64); 5] = [
    (2, 5_000),
    (4, 5_000),
    (16, 10_000),
    (64, 10_000),
    (256, 70_000),
];

#[test]
fn chains_go_round_in_order_in_one_thread() {
    for (size, total) in RUNS {
        let (mem, mut driver, mut device) = queues(size, feature(VIRTIO_F_VERSION_1));
        let mut requester = Requester::new(size as u16);
        let mut chain = Chain::new();
        let mut served = 0;
        // Each round moves at least one chain, so the rounds are bounded.
        for _ in 0..=total {
            requester.offer(&mut driver, &mem, total);
            while let Some(seq) = serve(&mut device, &mem, &mut chain) {
                assert_eq!(seq, served);
                served += 1;
            }
            requester.reclaim(&mut driver, &mem);
            if requester.next_back == total {
                break;
            }
        }
        assert_eq!((served, requester.next_back), (total, total), "size {size}");
        assert_eq!(driver.num_free(), size as u16);
        assert_eq!(device.in_flight(), 0);
        assert_eq!(device.stats().chains, total);
        assert_eq!(device.stats().bad_total(), 0);
        assert_eq!(driver.stats().reclaimed, total);
    }
}

#[test]
fn chains_go_round_in_order_across_two_threads() {
    for (size, total) in RUNS {
        let (mem, mut driver, mut device) = queues(size, feature(VIRTIO_F_VERSION_1));
        let device_mem = Arc::clone(&mem);
        std::thread::scope(|scope| {
            // The device thread ends once it has served `total` chains; the
            // driver offers all of them, so each wait is for progress the
            // other thread makes.
            scope.spawn(move || {
                let mut chain = Chain::new();
                let mut served = 0;
                while served < total {
                    match serve(&mut device, &device_mem, &mut chain) {
                        Some(seq) => {
                            assert_eq!(seq, served, "taken in order");
                            served += 1;
                        }
                        None => std::thread::yield_now(),
                    }
                }
                device.publish_used().unwrap();
                assert_eq!(device.stats().chains, total);
            });
            let mut requester = Requester::new(size as u16);
            while requester.next_back < total {
                requester.offer(&mut driver, &mem, total);
                let before = requester.next_back;
                requester.reclaim(&mut driver, &mem);
                if requester.next_back == before {
                    std::thread::yield_now();
                }
            }
        });
        assert_eq!(driver.num_free(), size as u16, "size {size}");
        assert_eq!(driver.in_flight(), 0);
        assert_eq!(driver.stats().reclaimed, total);
    }
}
