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

/// A descriptor, briefly.
fn desc(addr: u64, len: u32, flags: u16, next: u16) -> Descriptor {
    Descriptor {
        addr,
        len,
        flags,
        next,
    }
}

const NEXT: u16 = VIRTQ_DESC_F_NEXT;
const WRITE: u16 = VIRTQ_DESC_F_WRITE;
const INDIRECT: u16 = VIRTQ_DESC_F_INDIRECT;

/// A driver that writes whatever it is told: descriptors straight into a
/// table, heads straight into the available ring.
struct RawDriver {
    mem: Arc<GuestMemory>,
    layout: QueueLayout,
    avail_idx: u16,
}

impl RawDriver {
    fn put(&self, table: u64, i: u16, d: Descriptor) {
        self.mem
            .write_from(table + DESC_SIZE * u64::from(i), &d.to_bytes())
            .unwrap();
    }

    fn put_direct(&self, i: u16, d: Descriptor) {
        self.put(self.layout.desc_table(), i, d);
    }

    fn offer(&mut self, head: u16) {
        self.mem
            .write_from(self.layout.avail_entry(self.avail_idx), &head.to_le_bytes())
            .unwrap();
        self.avail_idx = self.avail_idx.wrapping_add(1);
        self.mem
            .store_u16(self.layout.avail_idx(), self.avail_idx, Ordering::Release)
            .unwrap();
    }

    /// The used entry at free-running index `idx`: (id, len).
    fn used(&self, idx: u16) -> (u32, u32) {
        let e = bytes(&self.mem, self.layout.used_entry(idx), 8);
        (
            u32::from_le_bytes(e[..4].try_into().unwrap()),
            u32::from_le_bytes(e[4..].try_into().unwrap()),
        )
    }
}

fn raw_device(size: u32, features: u64) -> (RawDriver, DeviceQueue) {
    let mem = memory();
    let layout = QueueLayout::contiguous(RINGS, size).unwrap();
    let device = DeviceQueue::new(Arc::clone(&mem), layout, features).unwrap();
    (
        RawDriver {
            mem,
            layout,
            avail_idx: 0,
        },
        device,
    )
}

/// A malformed chain: a name, what to write (returning the head), the reason.
type Case = (&'static str, fn(&RawDriver) -> u16, ChainErrorReason);

#[test]
fn malformed_chains_are_refused_returned_and_counted_and_the_queue_goes_on() {
    use ChainErrorReason::*;
    let cases: [Case; 18] = [
        (
            "two-descriptor loop",
            |d| {
                d.put_direct(0, desc(DATA, 8, NEXT, 1));
                d.put_direct(1, desc(DATA, 8, NEXT, 0));
                0
            },
            Loop,
        ),
        (
            "self loop",
            |d| {
                d.put_direct(2, desc(DATA, 8, NEXT, 2));
                2
            },
            Loop,
        ),
        (
            "next out of range",
            |d| {
                d.put_direct(0, desc(DATA, 8, NEXT, 4));
                0
            },
            NextOutOfRange,
        ),
        ("head out of range", |_| 7, HeadOutOfRange),
        (
            "buffer below memory",
            |d| {
                d.put_direct(1, desc(0x1000, 8, 0, 0));
                1
            },
            OutsideMemory,
        ),
        (
            "buffer crossing the end",
            |d| {
                d.put_direct(1, desc(BASE + MEM_LEN as u64 - 4, 8, 0, 0));
                1
            },
            OutsideMemory,
        ),
        (
            "buffer wrapping the address space",
            |d| {
                d.put_direct(1, desc(u64::MAX - 2, 8, 0, 0));
                1
            },
            OutsideMemory,
        ),
        (
            "indirect table of 24 bytes",
            |d| {
                d.put_direct(0, desc(TABLES, 24, INDIRECT, 0));
                0
            },
            IndirectBadLength,
        ),
        (
            "empty indirect table",
            |d| {
                d.put_direct(0, desc(TABLES, 0, INDIRECT, 0));
                0
            },
            IndirectBadLength,
        ),
        (
            "indirect with next",
            |d| {
                d.put_direct(0, desc(TABLES, 16, INDIRECT | NEXT, 1));
                0
            },
            IndirectWithNext,
        ),
        (
            "nested indirect",
            |d| {
                d.put(TABLES, 0, desc(TABLES + 0x100, 16, INDIRECT, 0));
                d.put_direct(0, desc(TABLES, 16, INDIRECT, 0));
                0
            },
            NestedIndirect,
        ),
        (
            "indirect table outside memory",
            |d| {
                d.put_direct(0, desc(0x10, 16, INDIRECT, 0));
                0
            },
            OutsideMemory,
        ),
        (
            "indirect table longer than the queue",
            |d| {
                for i in 0..5 {
                    d.put(TABLES, i, desc(DATA, 8, NEXT, i + 1));
                }
                d.put(TABLES, 4, desc(DATA, 8, 0, 0));
                d.put_direct(0, desc(TABLES, 80, INDIRECT, 0));
                0
            },
            TooLong,
        ),
        (
            "direct then indirect, longer than the queue",
            |d| {
                for i in 0..4 {
                    d.put(TABLES, i, desc(DATA, 8, 0, 0));
                }
                d.put_direct(0, desc(DATA, 8, NEXT, 1));
                d.put_direct(1, desc(TABLES, 64, INDIRECT, 0));
                0
            },
            TooLong,
        ),
        (
            "loop in an indirect table",
            |d| {
                d.put(TABLES, 0, desc(DATA, 8, NEXT, 1));
                d.put(TABLES, 1, desc(DATA, 8, NEXT, 0));
                d.put_direct(0, desc(TABLES, 32, INDIRECT, 0));
                0
            },
            Loop,
        ),
        (
            "next past an indirect table",
            |d| {
                d.put(TABLES, 0, desc(DATA, 8, NEXT, 2));
                d.put(TABLES, 1, desc(DATA, 8, 0, 0));
                d.put_direct(0, desc(TABLES, 32, INDIRECT, 0));
                0
            },
            NextOutOfRange,
        ),
        (
            "readable after writable",
            |d| {
                d.put_direct(0, desc(DATA, 8, WRITE | NEXT, 1));
                d.put_direct(1, desc(DATA, 8, 0, 0));
                0
            },
            ReadableAfterWritable,
        ),
        (
            "readable after writable in an indirect table",
            |d| {
                d.put(TABLES, 0, desc(DATA, 8, WRITE | NEXT, 1));
                d.put(TABLES, 1, desc(DATA, 8, 0, 0));
                d.put_direct(0, desc(TABLES, 32, INDIRECT, 0));
                0
            },
            ReadableAfterWritable,
        ),
    ];
    let (mut driver, mut device) = raw_device(4, feature(VIRTIO_F_INDIRECT_DESC));
    let mut used_idx = 0u16;
    for (n, (name, write, reason)) in cases.iter().enumerate() {
        driver
            .mem
            .write_from(driver.layout.desc_table(), &[0; 64])
            .unwrap();
        let head = write(&driver);
        driver.offer(head);
        assert_eq!(
            device.pop_avail(),
            Err(VirtioError::Chain(ChainError {
                head,
                reason: *reason
            })),
            "{name}"
        );
        assert_eq!(
            device.stats().bad(*reason) as usize,
            cases[..=n].iter().filter(|c| c.2 == *reason).count()
        );
        device.publish_used().unwrap();
        assert_eq!(
            driver.used(used_idx),
            (u32::from(head), 0),
            "{name}: returned with length 0"
        );
        used_idx += 1;

        // The queue goes on: a good chain after it is taken.
        driver.put_direct(3, desc(DATA, 8, 0, 0));
        driver.offer(3);
        let chain = device.pop_avail().unwrap().expect("the good chain");
        assert_eq!(chain.segments(), [readable(DATA, 8)], "{name}");
        device.push_used(3, 0).unwrap();
        device.publish_used().unwrap();
        assert_eq!(driver.used(used_idx), (3, 0));
        used_idx += 1;
        assert_eq!(device.pop_avail(), Ok(None));
    }
    assert_eq!(device.stats().bad_total(), cases.len() as u64);
    assert_eq!(device.stats().chains, cases.len() as u64);
    assert_eq!(device.in_flight(), 0);

    // Indirect descriptors without the feature.
    let (mut driver, mut device) = raw_device(4, 0);
    driver.put(TABLES, 0, desc(DATA, 8, 0, 0));
    driver.put_direct(0, desc(TABLES, 16, INDIRECT, 0));
    driver.offer(0);
    assert_eq!(
        device.pop_avail(),
        Err(VirtioError::Chain(ChainError {
            head: 0,
            reason: IndirectNotNegotiated
        }))
    );
}

#[test]
fn an_impossible_available_index_takes_nothing() {
    let (driver, mut device) = raw_device(4, 0);
    let idx = driver.layout.avail_idx();
    driver.mem.store_u16(idx, 5, Ordering::Release).unwrap();
    for _ in 0..2 {
        assert_eq!(
            device.pop_avail(),
            Err(VirtioError::AvailIndexJump { last: 0, idx: 5 })
        );
    }
    assert_eq!(device.stats().index_errors, 2);
    assert_eq!(device.last_avail_idx(), 0);
    driver.mem.store_u16(idx, 0, Ordering::Release).unwrap();
    assert_eq!(device.pop_avail(), Ok(None));
    assert_eq!(device.push_used(0, 0), Err(VirtioError::NothingInFlight));
}

#[test]
fn bad_used_entries_are_errors_counted_and_never_reclaim_twice() {
    let (mem, mut driver, _device) = queues(4, 0);
    let layout = *driver.layout();
    let head = driver
        .add_chain(&[readable(DATA, 8), writable(DATA + 64, 16)])
        .unwrap();
    driver.publish_avail().unwrap();
    let mut used_idx = 0u16;
    let mut post = |id: u32, len: u32| {
        let mut e = [0u8; 8];
        e[..4].copy_from_slice(&id.to_le_bytes());
        e[4..].copy_from_slice(&len.to_le_bytes());
        mem.write_from(layout.used_entry(used_idx), &e).unwrap();
        used_idx += 1;
        mem.store_u16(layout.used_idx(), used_idx, Ordering::Release)
            .unwrap();
    };
    // An id past the table, then one not in flight: skipped.
    post(9, 0);
    assert_eq!(driver.pop_used(), Err(VirtioError::BadUsedId { id: 9 }));
    post(u32::from(head) + 1, 0);
    assert_eq!(driver.pop_used(), Err(VirtioError::BadUsedId { id: 1 }));
    assert_eq!(driver.pop_used(), Ok(None));
    assert_eq!(driver.num_free(), 2, "the chain is still in flight");
    // A length past the writable bytes: reclaimed, reported.
    post(u32::from(head), 17);
    assert_eq!(
        driver.pop_used(),
        Err(VirtioError::BadUsedLen {
            head,
            len: 17,
            writable: 16
        })
    );
    assert_eq!((driver.num_free(), driver.in_flight()), (4, 0));
    // The same head again, with nothing in flight: the index moved past
    // more entries than chains in flight, so nothing is taken.
    post(u32::from(head), 0);
    assert_eq!(
        driver.pop_used(),
        Err(VirtioError::UsedIndexJump { last: 3, idx: 4 })
    );
    assert_eq!(driver.num_free(), 4, "never reclaimed twice");
    let stats = driver.stats();
    assert_eq!(
        (stats.bad_used_ids, stats.bad_used_lens, stats.index_errors),
        (2, 1, 1)
    );
    // The driver goes on with good chains.
    assert!(driver.add_chain(&[readable(DATA, 8)]).is_ok());
}

#[test]
fn need_event_follows_the_specification() {
    // (event index, new index, old index, notify?)
    let cases: [(u16, u16, u16, bool); 12] = [
        (0, 1, 0, true),   // the first entry is the event
        (0, 0, 0, false),  // nothing moved
        (4, 5, 4, true),   // moved just past the event
        (5, 5, 4, false),  // the event is the next entry
        (3, 5, 4, false),  // the event was passed before
        (0, 20, 0, true),  // a batch passing the event at its start
        (19, 20, 0, true), // ... at its end
        (20, 20, 0, false),
        (0xffff, 0, 0xfffe, true), // across the 16-bit wrap
        (0xfffe, 0, 0xffff, false),
        (0, 2, 0xfffe, true),
        (2, 2, 0xfffe, false),
    ];
    for (event, new, old, want) in cases {
        assert_eq!(
            need_event(event, new, old),
            want,
            "event {event}, {old} -> {new}"
        );
    }
}

#[test]
fn with_event_idx_kicks_happen_exactly_when_avail_event_is_passed() {
    let features = feature(VIRTIO_F_VERSION_1) | feature(VIRTIO_F_EVENT_IDX);
    let (_mem, mut driver, mut device) = queues(16, features);
    // The device asks for a kick when entry 2 is made available.
    device.set_avail_event(2).unwrap();
    // (chains published in one batch, kick?)
    for (batch, want) in [(1, false), (1, false), (1, true), (1, false), (0, false)] {
        for _ in 0..batch {
            driver.add_chain(&[readable(DATA, 8)]).unwrap();
        }
        driver.publish_avail().unwrap();
        assert_eq!(driver.needs_kick().unwrap(), want);
    }
    // The device takes all four and waits: it asks for the next one.
    let mut taken = 0;
    while let Some(chain) = device.pop_avail().unwrap() {
        device.push_used(chain.head(), 0).unwrap();
        taken += 1;
    }
    assert_eq!(taken, 4);
    assert!(!device.enable_notify().unwrap(), "nothing pending");
    // A batch of three passes avail_event 4 at its start.
    for _ in 0..3 {
        driver.add_chain(&[readable(DATA, 8)]).unwrap();
    }
    driver.publish_avail().unwrap();
    assert!(driver.needs_kick().unwrap());
    assert!(device.enable_notify().unwrap(), "three pending");
}

#[test]
fn with_event_idx_notifications_happen_exactly_when_used_event_is_passed() {
    let features = feature(VIRTIO_F_VERSION_1) | feature(VIRTIO_F_EVENT_IDX);
    let (_mem, mut driver, mut device) = queues(16, features);
    for _ in 0..6 {
        driver.add_chain(&[readable(DATA, 8)]).unwrap();
    }
    driver.publish_avail().unwrap();
    // The driver asks for a notification when used entry 1 is written.
    driver.set_used_event(1).unwrap();
    for (batch, want) in [(1, false), (1, true), (1, false), (0, false)] {
        for _ in 0..batch {
            let chain = device.pop_avail().unwrap().unwrap();
            device.push_used(chain.head(), 0).unwrap();
        }
        device.publish_used().unwrap();
        assert_eq!(device.needs_notify().unwrap(), want);
    }
    // The driver reclaims the three and waits for more: notified at the next.
    while driver.pop_used().unwrap().is_some() {}
    assert!(!driver.enable_interrupts().unwrap());
    let chain = device.pop_avail().unwrap().unwrap();
    device.push_used(chain.head(), 0).unwrap();
    device.publish_used().unwrap();
    assert!(device.needs_notify().unwrap());
    assert!(driver.enable_interrupts().unwrap(), "one pending");
}

#[test]
fn without_event_idx_the_ring_flags_suppress_notifications() {
    let (_mem, mut driver, mut device) = queues(8, feature(VIRTIO_F_VERSION_1));
    driver.add_chain(&[readable(DATA, 8)]).unwrap();
    driver.publish_avail().unwrap();
    assert!(driver.needs_kick().unwrap());
    assert!(!driver.needs_kick().unwrap(), "nothing new published");
    device.disable_notify().unwrap();
    driver.add_chain(&[readable(DATA, 8)]).unwrap();
    driver.publish_avail().unwrap();
    assert!(!driver.needs_kick().unwrap(), "the device polls");
    assert!(device.enable_notify().unwrap(), "two pending");
    driver.add_chain(&[readable(DATA, 8)]).unwrap();
    driver.publish_avail().unwrap();
    assert!(driver.needs_kick().unwrap());

    driver.disable_interrupts().unwrap();
    let chain = device.pop_avail().unwrap().unwrap();
    device.push_used(chain.head(), 0).unwrap();
    device.publish_used().unwrap();
    assert!(!device.needs_notify().unwrap(), "the driver polls");
    assert!(driver.enable_interrupts().unwrap(), "one pending");
    let chain = device.pop_avail().unwrap().unwrap();
    device.push_used(chain.head(), 0).unwrap();
    device.publish_used().unwrap();
    assert!(device.needs_notify().unwrap());
    assert!(!device.needs_notify().unwrap(), "nothing new published");
}

/// One step of a random exchange.
#[derive(Debug, Clone)]
enum Op {
    /// The driver adds a chain of this many readable and writable buffers.
    Add { readable: u8, writable: u8 },
    /// The driver publishes.
    Publish,
    /// The device takes a chain.
    Take,
    /// The device returns the chain it holds at this position (modulo).
    Return(usize),
    /// The device publishes.
    PublishUsed,
    /// The driver reclaims one chain.
    Reclaim,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (0u8..3, 0u8..3).prop_map(|(readable, writable)| Op::Add { readable, writable }),
        1 => Just(Op::Publish),
        2 => Just(Op::Take),
        2 => any::<usize>().prop_map(Op::Return),
        1 => Just(Op::PublishUsed),
        2 => Just(Op::Reclaim),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Random add, publish, take, return (in any order) and reclaim
    /// sequences against a model of the two rings: every chain arrives
    /// with its buffers, comes back once with its length, and every
    /// descriptor is free at the end.
    #[test]
    fn random_exchanges_match_the_model(
        size_log in 0u32..5,
        indirect in any::<bool>(),
        ops in proptest::collection::vec(op(), 1..200),
    ) {
        let size = 1u32 << size_log;
        let features = if indirect { feature(VIRTIO_F_INDIRECT_DESC) } else { 0 };
        let (_mem, mut driver, mut device) = queues(size, features);
        // The model: chains added and not published, published and not
        // taken, taken and held by the device, returned and not published,
        // published and not reclaimed.
        let mut added: Vec<(u16, Vec<Segment>)> = Vec::new();
        let mut avail: VecDeque<(u16, Vec<Segment>)> = VecDeque::new();
        let mut held: Vec<Chain> = Vec::new();
        let mut returned: Vec<Used> = Vec::new();
        let mut used: VecDeque<Used> = VecDeque::new();
        // Descriptors in flight per head, and the tables in use.
        let mut descs_in_flight = 0u32;
        let mut descs_of: Vec<u32> = vec![0; size as usize];
        let mut next_addr = DATA;
        let mut tables_used = 0u64;
        for op in ops {
            match op {
                Op::Add { readable: r, writable: w } => {
                    let mut segments = Vec::new();
                    for i in 0..(r + w) {
                        segments.push(Segment { addr: next_addr, len: 8 + u32::from(i), writable: i >= r });
                        next_addr = DATA + (next_addr + 64 - DATA) % 0x4_0000;
                    }
                    let use_table = indirect && segments.len() > 1;
                    let need = if use_table { 1 } else { segments.len() as u32 };
                    let free = size - descs_in_flight;
                    let result = if use_table {
                        // A table slot per chain, in rotation: far more
                        // slots than chains can be in flight.
                        tables_used += 1;
                        driver.add_indirect(TABLES + 0x100 * (tables_used % 256), &segments)
                    } else {
                        driver.add_chain(&segments)
                    };
                    if segments.is_empty() {
                        prop_assert_eq!(result, Err(VirtioError::EmptyChain));
                    } else if (use_table && segments.len() > size as usize) || need > free {
                        prop_assert!(matches!(result, Err(VirtioError::NoFreeDescriptors { .. })), "{:?}", result);
                    } else {
                        let head = result.unwrap();
                        prop_assert_eq!(descs_of[usize::from(head)], 0, "head in use");
                        descs_of[usize::from(head)] = need;
                        descs_in_flight += need;
                        added.push((head, segments));
                    }
                }
                Op::Publish => {
                    driver.publish_avail().unwrap();
                    avail.extend(added.drain(..));
                }
                Op::Take => match device.pop_avail().unwrap() {
                    Some(chain) => {
                        let (head, segments) = avail.pop_front().expect("the model has one");
                        prop_assert_eq!(chain.head(), head);
                        prop_assert_eq!(chain.segments(), &segments[..]);
                        held.push(chain);
                    }
                    None => prop_assert!(avail.is_empty()),
                },
                Op::Return(at) => {
                    if !held.is_empty() {
                        let chain = held.remove(at % held.len());
                        let len = chain.writable_len().min(5) as u32;
                        device.push_used(chain.head(), len).unwrap();
                        returned.push(Used { head: chain.head(), len });
                    } else {
                        prop_assert_eq!(device.push_used(0, 0), Err(VirtioError::NothingInFlight));
                    }
                }
                Op::PublishUsed => {
                    device.publish_used().unwrap();
                    used.extend(returned.drain(..));
                }
                Op::Reclaim => {
                    let got = driver.pop_used().unwrap();
                    prop_assert_eq!(got, used.pop_front());
                    if let Some(u) = got {
                        descs_in_flight -= std::mem::take(&mut descs_of[usize::from(u.head)]);
                    }
                }
            }
            prop_assert_eq!(u32::from(driver.num_free()), size - descs_in_flight);
        }
        // Drain: everything comes back, every descriptor is free.
        driver.publish_avail().unwrap();
        avail.extend(added.drain(..));
        while let Some(chain) = device.pop_avail().unwrap() {
            prop_assert_eq!(chain.head(), avail.pop_front().unwrap().0);
            held.push(chain);
        }
        for chain in held.drain(..) {
            device.push_used(chain.head(), 0).unwrap();
            returned.push(Used { head: chain.head(), len: 0 });
        }
        device.publish_used().unwrap();
        used.extend(returned.drain(..));
        while let Some(u) = driver.pop_used().unwrap() {
            prop_assert_eq!(Some(u), used.pop_front());
        }
        prop_assert!(used.is_empty());
        prop_assert_eq!(u32::from(driver.num_free()), size);
        prop_assert_eq!(driver.in_flight(), 0);
        prop_assert_eq!(device.stats().bad_total(), 0);
    }
}

/// `used.idx` as the device published it.
fn used_idx(d: &RawDriver) -> u16 {
    d.mem
        .load_u16(d.layout.used_idx(), Ordering::Acquire)
        .unwrap()
}

/// A one-buffer readable chain at descriptor `i`.
fn good_chain(d: &RawDriver, i: u16) {
    d.put_direct(i, desc(DATA + 64 * u64::from(i), 16, 0, 0));
}

/// A chain at descriptor `i` whose `next` is past the table.
fn bad_chain(d: &RawDriver, i: u16) {
    d.put_direct(i, desc(DATA, 8, NEXT, d.layout.size()));
}

#[test]
fn with_in_order_read_chains_go_back_as_one_used_entry_in_the_runs_first_slot() {
    let (mut d, mut device) = raw_device(8, feature(VIRTIO_F_IN_ORDER));
    // Entries the device must not write keep this mark.
    for i in 0..8 {
        d.mem
            .write_from(d.layout.used_entry(i), &[0xee; 8])
            .unwrap();
    }
    for i in 0..5 {
        good_chain(&d, i);
        d.offer(i);
    }
    let chains: Vec<Chain> = (0..5)
        .map(|_| device.pop_avail().unwrap().unwrap())
        .collect();
    device.push_used_read(&chains[..3]).unwrap();
    device.push_used_read(&chains[3..]).unwrap();
    device.publish_used().unwrap();
    assert_eq!(used_idx(&d), 5);
    assert_eq!(
        d.used(0),
        (2, 0),
        "the first run: its last head, in its first slot"
    );
    assert_eq!(d.used(3), (4, 0), "the second run");
    for i in [1, 2, 4] {
        assert_eq!(
            bytes(&d.mem, d.layout.used_entry(i), 8),
            [0xee; 8],
            "slot {i}"
        );
    }
    assert_eq!(device.in_flight(), 0);
    // More chains than in flight: refused, nothing written.
    assert_eq!(
        device.push_used_read(&chains[..1]),
        Err(VirtioError::NothingInFlight)
    );
    assert_eq!(bytes(&d.mem, d.layout.used_entry(5), 8), [0xee; 8]);
    // Nothing to return: nothing written.
    device.push_used_read(&[]).unwrap();
    device.publish_used().unwrap();
    assert_eq!(used_idx(&d), 5);
}

#[test]
fn without_in_order_read_chains_go_back_as_an_entry_each() {
    let (mut d, mut device) = raw_device(8, 0);
    for i in 0..3 {
        good_chain(&d, i);
        d.offer(i);
    }
    let chains: Vec<Chain> = (0..3)
        .map(|_| device.pop_avail().unwrap().unwrap())
        .collect();
    device.push_used_read(&chains).unwrap();
    device.publish_used().unwrap();
    assert_eq!(used_idx(&d), 3);
    for i in 0..3 {
        assert_eq!(d.used(i), (u32::from(i), 0));
    }
    assert_eq!(device.in_flight(), 0);
}

/// The used ring's order of returns when a refused chain follows one in
/// flight: with `VIRTIO_F_IN_ORDER` the refused chain waits in the ring
/// for it, without it goes back at once.
fn returns_around_a_refused_chain(features: u64) -> (Vec<u32>, u64) {
    let (mut d, mut device) = raw_device(8, features);
    good_chain(&d, 0);
    bad_chain(&d, 1);
    good_chain(&d, 2);
    for i in 0..3 {
        d.offer(i);
    }
    let mut first = Chain::new();
    let mut chain = Chain::new();
    assert_eq!(device.pop_avail_into(&mut first), Ok(true));
    let refused_at_once = match device.pop_avail_into(&mut chain) {
        Err(VirtioError::Chain(e)) => {
            assert_eq!(e.head, 1);
            assert_eq!(e.reason, ChainErrorReason::NextOutOfRange);
            true
        }
        Ok(false) => {
            assert_eq!(device.stats().bad_total(), 0, "not refused yet");
            assert_eq!(device.last_avail_idx(), 1, "left in the ring");
            false
        }
        other => panic!("{other:?}"),
    };
    device.push_used(first.head(), 0).unwrap();
    if !refused_at_once {
        assert!(matches!(
            device.pop_avail_into(&mut chain),
            Err(VirtioError::Chain(ChainError { head: 1, .. }))
        ));
    }
    assert_eq!(device.pop_avail_into(&mut chain), Ok(true));
    assert_eq!(chain.head(), 2);
    device.push_used(2, 0).unwrap();
    device.publish_used().unwrap();
    assert_eq!(used_idx(&d), 3);
    assert_eq!(device.in_flight(), 0);
    let order = (0..3).map(|i| d.used(i).0).collect();
    (order, device.stats().bad_total())
}

#[test]
fn with_in_order_a_refused_chain_goes_back_after_the_chains_taken_before_it() {
    assert_eq!(
        returns_around_a_refused_chain(feature(VIRTIO_F_IN_ORDER)),
        (vec![0, 1, 2], 1)
    );
    assert_eq!(returns_around_a_refused_chain(0), (vec![1, 0, 2], 1));
}

/// One step of a random in-order exchange.
#[derive(Debug, Clone)]
enum InOrderOp {
    /// The driver offers a chain, good or one the device refuses.
    Offer { bad: bool },
    /// The device takes up to this many chains and returns them all, as
    /// read chains (one entry with `VIRTIO_F_IN_ORDER`) or one by one.
    Burst { take: u8, read: bool },
}

fn in_order_op() -> impl Strategy<Value = InOrderOp> {
    prop_oneof![
        3 => any::<bool>().prop_map(|bad| InOrderOp::Offer { bad }),
        2 => (1u8..10, any::<bool>()).prop_map(|(take, read)| InOrderOp::Burst { take, read }),
    ]
}

/// A device's burst as the vhost port runs it: takes up to `take` chains
/// (refused ones go back by themselves), then returns the ones taken.
fn in_order_burst(device: &mut DeviceQueue, take: u8, read: bool) {
    let mut chains = Vec::new();
    for _ in 0..take {
        let mut chain = Chain::new();
        match device.pop_avail_into(&mut chain) {
            Ok(true) => chains.push(chain),
            Ok(false) => break,
            Err(VirtioError::Chain(_)) => {}
            Err(e) => panic!("{e:?}"),
        }
    }
    if read {
        device.push_used_read(&chains).unwrap();
    } else {
        for chain in &chains {
            device.push_used(chain.head(), 0).unwrap();
        }
    }
    device.publish_used().unwrap();
}

/// The driver's side of in-order returns: from its position `at`, reads
/// the entry there, takes the chains in offered order up to the entry's
/// head, and goes on after them, until `used.idx`. Returns the heads.
fn in_order_reclaim(d: &RawDriver, at: &mut u16, offered: &mut VecDeque<u16>) -> Vec<u16> {
    let mut back = Vec::new();
    let idx = used_idx(d);
    while *at != idx {
        let (id, len) = d.used(*at);
        assert_eq!(len, 0);
        loop {
            let head = offered
                .pop_front()
                .expect("an entry past the chains offered");
            back.push(head);
            *at = at.wrapping_add(1);
            if u32::from(head) == id {
                break;
            }
            assert_ne!(*at, idx, "a run past used.idx");
        }
    }
    back
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Random offers (good and refused chains) and bursts against a device
    /// with `VIRTIO_F_IN_ORDER` and one without: the in-order device
    /// returns every chain in the order offered, read by a driver that
    /// counts runs; both count the same chains and refusals; nothing stays
    /// in flight.
    #[test]
    fn random_in_order_exchanges_return_every_chain_in_offered_order(
        size_log in 1u32..5,
        ops in proptest::collection::vec(in_order_op(), 1..200),
    ) {
        let size = 1u32 << size_log;
        let (mut d, mut device) = raw_device(size, feature(VIRTIO_F_IN_ORDER));
        let (mut plain_d, mut plain) = raw_device(size, 0);
        let mut offered = VecDeque::new();
        let mut returned = Vec::new();
        let mut at = 0u16;
        let mut next = 0u16;
        for op in ops {
            match op {
                InOrderOp::Offer { bad } => {
                    // Descriptors are reused once their chain is back.
                    if offered.len() < size as usize {
                        let head = next % size as u16;
                        for driver in [&mut d, &mut plain_d] {
                            if bad { bad_chain(driver, head) } else { good_chain(driver, head) }
                            driver.offer(head);
                        }
                        offered.push_back(head);
                        next = next.wrapping_add(1);
                    }
                }
                InOrderOp::Burst { take, read } => {
                    in_order_burst(&mut device, take, read);
                    in_order_burst(&mut plain, take, read);
                    returned.extend(in_order_reclaim(&d, &mut at, &mut offered));
                }
            }
        }
        // Drain: every chain comes back, in order, refused ones counted.
        for _ in 0..=size {
            in_order_burst(&mut device, 8, true);
            in_order_burst(&mut plain, 8, true);
        }
        returned.extend(in_order_reclaim(&d, &mut at, &mut offered));
        prop_assert!(offered.is_empty());
        let expected: Vec<u16> = (0..next).map(|i| i % size as u16).collect();
        prop_assert_eq!(returned, expected);
        prop_assert_eq!(used_idx(&d), next);
        prop_assert_eq!(used_idx(&plain_d), next);
        prop_assert_eq!(device.in_flight(), 0);
        prop_assert_eq!(plain.in_flight(), 0);
        prop_assert_eq!(device.stats(), plain.stats());
    }
}

/// One step of a device taking chains with and without looking ahead.
#[derive(Debug, Clone)]
enum AheadOp {
    /// The driver offers a chain, good or one the device refuses.
    Offer { bad: bool },
    /// The device loads the index and prefetches this many chains ahead.
    Ready(u8),
    /// The device takes a chain.
    Take,
    /// The device gives back up to this many of the chains it took last.
    Untake(u8),
    /// The device returns every chain it holds.
    ReturnAll,
}

fn ahead_op() -> impl Strategy<Value = AheadOp> {
    prop_oneof![
        3 => any::<bool>().prop_map(|bad| AheadOp::Offer { bad }),
        2 => (0u8..12).prop_map(AheadOp::Ready),
        4 => Just(AheadOp::Take),
        1 => (1u8..4).prop_map(AheadOp::Untake),
        1 => Just(AheadOp::ReturnAll),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// The heads `prefetch_descs` keeps change nothing: a device that looks
    /// ahead before taking takes, refuses and gives back exactly the chains
    /// one that never looks ahead does, through untakes and the index's
    /// wrap.
    #[test]
    fn taking_after_looking_ahead_takes_the_same_chains(
        size_log in 1u32..5,
        wrap_from in prop_oneof![Just(0u16), Just(u16::MAX - 20)],
        ops in proptest::collection::vec(ahead_op(), 1..300),
    ) {
        let size = 1u32 << size_log;
        let mem = [memory(), memory()];
        let layout = QueueLayout::contiguous(RINGS, size).unwrap();
        let mut devices = mem.clone().map(|m| {
            m.store_u16(layout.avail_idx(), wrap_from, Ordering::Release).unwrap();
            DeviceQueue::with_base(m, layout, 0, wrap_from).unwrap()
        });
        let mut drivers = mem.map(|mem| RawDriver { mem, layout, avail_idx: wrap_from });
        // Chains each device holds, in the order taken; chains offered and
        // not yet returned.
        let mut held: [Vec<u16>; 2] = [Vec::new(), Vec::new()];
        let mut outstanding = 0usize;
        let mut next = 0u16;
        for op in ops {
            match op {
                AheadOp::Offer { bad } => {
                    if outstanding < size as usize {
                        let head = next % size as u16;
                        for d in &mut drivers {
                            if bad { bad_chain(d, head) } else { good_chain(d, head) }
                            d.offer(head);
                        }
                        outstanding += 1;
                        next = next.wrapping_add(1);
                    }
                }
                AheadOp::Ready(n) => {
                    let ready = devices[0].ready().unwrap();
                    devices[0].prefetch_descs(u16::from(n).min(ready));
                }
                AheadOp::Take => {
                    let mut got = Vec::new();
                    for device in &mut devices {
                        let mut chain = Chain::new();
                        got.push(match device.pop_avail_into(&mut chain) {
                            Ok(true) => Some(chain.head()),
                            Ok(false) => None,
                            Err(VirtioError::Chain(e)) => Some(u16::MAX - e.head),
                            Err(e) => panic!("{e:?}"),
                        });
                    }
                    prop_assert_eq!(got[0], got[1]);
                    match got[0] {
                        Some(head) if head < size as u16 => {
                            held[0].push(head);
                            held[1].push(head);
                        }
                        // Refused: back already.
                        Some(_) => outstanding -= 1,
                        None => {}
                    }
                }
                AheadOp::Untake(n) => {
                    let n = usize::from(n).min(held[0].len());
                    for (device, held) in devices.iter_mut().zip(&mut held) {
                        device.untake(n as u16).unwrap();
                        held.truncate(held.len() - n);
                    }
                }
                AheadOp::ReturnAll => {
                    outstanding -= held[0].len();
                    for (device, held) in devices.iter_mut().zip(&mut held) {
                        for head in held.drain(..) {
                            device.push_used(head, 0).unwrap();
                        }
                        device.publish_used().unwrap();
                    }
                }
            }
            prop_assert_eq!(devices[0].last_avail_idx(), devices[1].last_avail_idx());
        }
        prop_assert_eq!(devices[0].stats(), devices[1].stats());
    }
}
