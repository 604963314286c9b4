//! Tests of the packed virtqueue: layout against literal bytes, a driver and
//! a device moving chains round the ring (in one thread and across two,
//! with the wrap counters flipping), malformed chains, bad used
//! descriptors, notification suppression, and random operation sequences
//! against a model.

use std::collections::VecDeque;
use std::sync::Arc;

use proptest::prelude::*;

use super::memory::{GuestMemory, Mapping};
use super::packed::*;
use super::split::{Segment, Used, VIRTQ_DESC_F_INDIRECT, VIRTQ_DESC_F_NEXT, VIRTQ_DESC_F_WRITE};
use super::*;
use crate::sync::Ordering;

/// Where the test memory starts (not 0, so translation is exercised).
const BASE: u64 = 0x10_0000;
/// Its length.
const MEM_LEN: usize = 1 << 20;
/// Where the ring goes.
const RING: u64 = BASE;
/// Where indirect tables go.
const TABLES: u64 = BASE + 0x4_0000;
/// Where buffers go.
const DATA: u64 = BASE + 0x8_0000;

const NEXT: u16 = VIRTQ_DESC_F_NEXT;
const WRITE: u16 = VIRTQ_DESC_F_WRITE;
const INDIRECT: u16 = VIRTQ_DESC_F_INDIRECT;
const AVAIL: u16 = VIRTQ_DESC_F_AVAIL;
const USED: u16 = VIRTQ_DESC_F_USED;

fn memory() -> Arc<GuestMemory> {
    Arc::new(GuestMemory::new(vec![(BASE, Mapping::anonymous(MEM_LEN).unwrap())]).unwrap())
}

/// A driver and a device on one fresh memory, with the ring at [`RING`].
fn queues(size: u32, features: u64) -> (Arc<GuestMemory>, PackedDriverQueue, PackedDeviceQueue) {
    let mem = memory();
    let layout = PackedLayout::contiguous(RING, size).unwrap();
    let driver = PackedDriverQueue::new(Arc::clone(&mem), layout, features).unwrap();
    let device = PackedDeviceQueue::new(Arc::clone(&mem), layout, features).unwrap();
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

fn position(index: u16, wrap: bool) -> RingPosition {
    RingPosition { index, wrap }
}

#[test]
fn descriptor_and_event_bytes_are_the_specifications() {
    let desc = PackedDescriptor {
        addr: 0x0102_0304_0506_0708,
        len: 0x1122_3344,
        id: 0xabcd,
        flags: NEXT | WRITE | AVAIL,
    };
    let raw = [
        0x08, 0x07, 0x06, 0x05, 0x04, 0x03, 0x02, 0x01, // addr
        0x44, 0x33, 0x22, 0x11, // len
        0xcd, 0xab, // id
        0x83, 0x00, // flags: NEXT | WRITE | AVAIL (bit 7)
    ];
    assert_eq!(desc.to_bytes(), raw);
    assert_eq!(PackedDescriptor::from_bytes(raw), desc);
    assert_eq!(USED, 0x8000, "USED is bit 15");
    let event = EventSuppression {
        desc: position(0x1234, true),
        flags: RING_EVENT_FLAGS_DESC,
    };
    assert_eq!(event.to_bytes(), [0x34, 0x92, 0x02, 0x00], "wrap in bit 15");
    assert_eq!(EventSuppression::from_bytes(event.to_bytes()), event);
    assert_eq!(
        (
            RING_EVENT_FLAGS_ENABLE,
            RING_EVENT_FLAGS_DISABLE,
            RING_EVENT_FLAGS_DESC
        ),
        (0, 1, 2)
    );
}

#[test]
fn layout_places_the_areas_as_the_specification_sizes_them() {
    // 5 entries: a packed queue's size need not be a power of two.
    let layout = PackedLayout::contiguous(0x1000, 5).unwrap();
    assert_eq!(layout.size(), 5);
    assert_eq!(layout.desc(4), 0x1040);
    assert_eq!(layout.desc_flags(4), 0x104e, "flags are the last 2 bytes");
    assert_eq!(layout.driver_event(), 0x1050, "16 * 5 bytes of ring");
    assert_eq!(layout.device_event(), 0x1054);
    assert_eq!(layout.end(), 0x1058);
    for bad in [0, 32769, u32::MAX] {
        assert_eq!(check_queue_size(bad), Err(VirtioError::BadQueueSize(bad)));
    }
    for good in [1, 3, 256, 1000, 32768] {
        assert_eq!(check_queue_size(good), Ok(good as u16));
    }
    assert_eq!(
        PackedLayout::new(8, 0x1008, 0x2000, 0x3000),
        Err(VirtioError::Misaligned {
            gpa: 0x1008,
            align: 16
        })
    );
    assert!(PackedLayout::new(8, 0x1000, 0x2002, 0x3000).is_err());
    assert!(PackedLayout::new(8, 0x1000, 0x2000, 0x3002).is_err());
    let mem = memory();
    let outside = PackedLayout::new(8, RING, RING + 0x100, BASE + MEM_LEN as u64).unwrap();
    assert!(PackedDeviceQueue::new(Arc::clone(&mem), outside, 0).is_err());
    assert!(PackedDriverQueue::new(mem, outside, 0).is_err());
}

#[test]
fn positions_wrap_with_their_counter() {
    let start = RingPosition::START;
    assert_eq!(start, position(0, true));
    assert_eq!(start.advance(2, 3), position(2, true));
    assert_eq!(start.advance(3, 3), position(0, false), "a whole lap");
    assert_eq!(position(2, false).advance(2, 3), position(1, true));
    assert_eq!(position(5, true).to_off_wrap(), 0x8005);
    assert_eq!(RingPosition::from_off_wrap(0x7fff), position(0x7fff, false));
    assert!(is_avail(AVAIL, true) && is_avail(USED, false));
    assert!(is_used(AVAIL | USED, true) && is_used(0, false));
    assert!(!is_avail(0, true) && !is_used(0, true), "zeroed: neither");
    assert!(!is_avail(AVAIL | USED, true) && !is_used(AVAIL, true));
}

#[test]
fn the_ring_in_memory_holds_the_literal_bytes() {
    let (mem, mut driver, mut device) = queues(2, feature(VIRTIO_F_VERSION_1));
    let layout = *driver.layout();
    let id = driver
        .add_chain(&[readable(DATA, 0x10), writable(DATA + 0x40, 0x20)])
        .unwrap();
    assert_eq!(id, 0);
    // The second descriptor is written; the head's flags are held back.
    assert_eq!(
        bytes(&mem, layout.desc(1), 16),
        [
            0x40, 0, 0x18, 0, 0, 0, 0, 0, // addr DATA + 0x40
            0x20, 0, 0, 0, // len
            0, 0, // id
            0x82, 0x00, // WRITE | AVAIL
        ]
    );
    assert_eq!(bytes(&mem, layout.desc_flags(0), 2), [0, 0]);
    assert!(device.pop_avail().unwrap().is_none(), "not yet published");
    driver.publish_avail().unwrap();
    assert_eq!(
        bytes(&mem, layout.desc(0), 16),
        [
            0, 0, 0x18, 0, 0, 0, 0, 0, // addr DATA
            0x10, 0, 0, 0, // len
            0, 0, // id
            0x81, 0x00, // NEXT | AVAIL
        ]
    );
    let chain = device.pop_avail().unwrap().unwrap();
    assert_eq!((chain.id(), chain.descs()), (0, 2));
    device.push_used(chain.id(), chain.descs(), 7).unwrap();
    device.publish_used().unwrap();
    assert_eq!(
        bytes(&mem, layout.desc(0), 16),
        [
            0, 0, 0x18, 0, 0, 0, 0, 0, // addr left alone
            7, 0, 0, 0, // bytes written
            0, 0, // id
            0x82, 0x80, // WRITE | AVAIL | USED: used on lap 1, written
        ]
    );
    assert_eq!(driver.pop_used().unwrap(), Some(Used { head: 0, len: 7 }));
    // Second lap: available is USED alone, used is neither bit.
    let id = driver.add_chain(&[readable(DATA, 4)]).unwrap();
    driver.publish_avail().unwrap();
    assert_eq!(bytes(&mem, layout.desc_flags(0), 2), [0x00, 0x80]);
    let chain = device.pop_avail().unwrap().unwrap();
    device.push_used(chain.id(), 1, 0).unwrap();
    device.publish_used().unwrap();
    assert_eq!(bytes(&mem, layout.desc_flags(0), 2), [0x00, 0x00]);
    assert_eq!(driver.pop_used().unwrap(), Some(Used { head: id, len: 0 }));
    // Event suppression: the driver's structure after enabling interrupts
    // with EVENT_IDX at used position 1, lap 0.
    let (mem, mut driver, _device) = queues(2, feature(VIRTIO_F_EVENT_IDX));
    for _ in 0..3 {
        driver.add_chain(&[writable(DATA, 4)]).unwrap();
        driver.publish_avail().unwrap();
        while driver.num_free() < 2 {
            // Play the device: mark the descriptor used in place.
            let at = driver.last_used();
            mem.store_u16(
                driver.layout().desc_flags(at.index),
                used_marking(at.wrap),
                Ordering::Release,
            )
            .unwrap();
            assert!(driver.pop_used().unwrap().is_some());
        }
    }
    assert_eq!(driver.last_used(), position(1, false));
    assert!(!driver.enable_interrupts().unwrap());
    assert_eq!(
        bytes(&mem, driver.layout().driver_event(), 4),
        [0x01, 0x00, 0x02, 0x00]
    );
}

#[test]
fn indirect_tables_carry_long_chains_in_one_descriptor() {
    let (mem, mut driver, mut device) = queues(4, feature(VIRTIO_F_INDIRECT_DESC));
    let segments = [
        readable(DATA, 8),
        readable(DATA + 8, 8),
        writable(DATA + 0x40, 8),
        writable(DATA + 0x48, 8),
    ];
    mem.write_from(DATA, b"abcdefghijklmnop").unwrap();
    let id = driver.add_indirect(TABLES, &segments).unwrap();
    assert_eq!(driver.num_free(), 3, "one ring descriptor");
    driver.publish_avail().unwrap();
    let table = PackedDescriptor::from_bytes(bytes(&mem, TABLES + 32, 16).try_into().unwrap());
    assert_eq!(
        table,
        PackedDescriptor {
            addr: DATA + 0x40,
            len: 8,
            id: 0,
            flags: WRITE
        }
    );
    let chain = device.pop_avail().unwrap().unwrap();
    assert_eq!((chain.id(), chain.descs()), (id, 1));
    assert_eq!(chain.segments(), segments);
    assert_eq!((chain.readable_len(), chain.writable_len()), (16, 16));
    let mut request = [0u8; 16];
    assert_eq!(chain.read(&mem, 0, &mut request).unwrap(), 16);
    assert_eq!(&request, b"abcdefghijklmnop");
    assert_eq!(chain.write(&mem, 4, b"0123456789ab").unwrap(), 12);
    device.push_used(chain.id(), chain.descs(), 16).unwrap();
    device.publish_used().unwrap();
    assert_eq!(driver.pop_used().unwrap(), Some(Used { head: id, len: 16 }));
    assert_eq!(bytes(&mem, DATA + 0x44, 12), b"0123456789ab");
    assert_eq!(driver.num_free(), 4);
    // Refused without the feature, or longer than the queue.
    let (_mem, mut plain, _device) = queues(4, 0);
    assert_eq!(
        plain.add_indirect(TABLES, &segments),
        Err(VirtioError::IndirectNotNegotiated)
    );
    assert!(matches!(
        driver.add_indirect(TABLES, &[readable(DATA, 8); 5]),
        Err(VirtioError::NoFreeDescriptors { need: 5, .. })
    ));
}

#[test]
fn the_driver_refuses_bad_chains_before_writing_anything() {
    let (mem, mut driver, _device) = queues(2, 0);
    let layout = *driver.layout();
    assert_eq!(driver.add_chain(&[]), Err(VirtioError::EmptyChain));
    assert_eq!(
        driver.add_chain(&[writable(DATA, 8), readable(DATA, 8)]),
        Err(VirtioError::ReadableAfterWritable)
    );
    assert!(matches!(
        driver.add_chain(&[readable(0x10, 8)]),
        Err(VirtioError::OutsideMemory { .. })
    ));
    assert_eq!(
        driver.add_chain(&[readable(DATA, 8); 3]),
        Err(VirtioError::NoFreeDescriptors { need: 3, free: 2 })
    );
    assert_eq!(bytes(&mem, layout.desc_ring(), 32), [0; 32]);
    assert_eq!((driver.num_free(), driver.in_flight()), (2, 0));
    assert_eq!(driver.next_avail(), RingPosition::START);
}

/// The device side of an in-order exchange: takes each chain, checks the
/// tagged request in its readable buffer, writes the reply into its
/// writable buffer, returns it; publishes when there is nothing to take.
fn serve(
    device: &mut PackedDeviceQueue,
    mem: &GuestMemory,
    chain: &mut PackedChain,
) -> Option<u64> {
    if !device.pop_avail_into(chain).unwrap() {
        device.publish_used().unwrap();
        return None;
    }
    let mut request = [0u8; 16];
    assert_eq!(chain.read(mem, 0, &mut request).unwrap(), 16);
    let seq = u64::from_le_bytes(request[..8].try_into().unwrap());
    assert_eq!(request[8..], tag(seq).to_le_bytes(), "request {seq} intact");
    let len = chain.write(mem, 0, &reply(seq)).unwrap() as u32;
    device.push_used(chain.id(), chain.descs(), len).unwrap();
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
/// (for two chains of three) a writable buffer for the reply, so chains
/// take one or two ring descriptors and the wrap points move about.
///
/// The chains in flight are consecutive sequence numbers, at most the queue
/// size of them, so `seq mod size` gives each a 64-byte slot of its own.
struct Requester {
    size: u64,
    /// Per buffer id: the sequence number of the chain in flight there.
    seq_of_id: Vec<u64>,
    next_seq: u64,
    next_back: u64,
    /// Ring descriptors of all chains added.
    descs: u64,
}

impl Requester {
    fn new(size: u16) -> Requester {
        Requester {
            size: u64::from(size),
            seq_of_id: vec![u64::MAX; usize::from(size)],
            next_seq: 0,
            next_back: 0,
            descs: 0,
        }
    }

    fn slot(&self, seq: u64) -> u64 {
        DATA + 64 * (seq % self.size)
    }

    /// Adds chains while descriptors are free, up to `total`; publishes.
    fn offer(&mut self, driver: &mut PackedDriverQueue, mem: &GuestMemory, total: u64) {
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
            let id = driver.add_chain(&segments).unwrap();
            assert_eq!(self.seq_of_id[usize::from(id)], u64::MAX, "id in use");
            self.seq_of_id[usize::from(id)] = seq;
            self.next_seq += 1;
            self.descs += segments.len() as u64;
        }
        driver.publish_avail().unwrap();
    }

    /// Reclaims what came back, checking order and replies.
    fn reclaim(&mut self, driver: &mut PackedDriverQueue, mem: &GuestMemory) {
        while let Some(used) = driver.pop_used().unwrap() {
            let seq = std::mem::replace(&mut self.seq_of_id[usize::from(used.head)], u64::MAX);
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

    /// Where both sides end after all chains: the position `descs` on from
    /// the start, the wrap counter flipped once per lap.
    fn end(&self) -> RingPosition {
        let laps = self.descs / self.size;
        position((self.descs % self.size) as u16, laps.is_multiple_of(2))
    }
}

/// Queue sizes and chain counts of the exchanges: 10^5 chains in all, in
/// rings of odd and even sizes, each passing its end thousands of times.
const RUNS: [(u32, u64); 5] = [
    (2, 5_000),
    (3, 10_000),
    (16, 10_000),
    (100, 25_000),
    (256, 50_000),
];

#[test]
fn chains_go_round_in_order_in_one_thread() {
    for (size, total) in RUNS {
        let (mem, mut driver, mut device) = queues(size, feature(VIRTIO_F_VERSION_1));
        let mut requester = Requester::new(size as u16);
        let mut chain = PackedChain::new();
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
        assert!(requester.descs / u64::from(size) > 100, "many laps");
        assert_eq!(driver.num_free(), size as u16);
        assert_eq!(device.in_flight(), 0);
        assert_eq!(device.stats().chains, total);
        assert_eq!(device.stats().bad_total(), 0);
        assert_eq!(driver.stats().reclaimed, total);
        let end = requester.end();
        assert_eq!(
            (driver.next_avail(), driver.last_used()),
            (end, end),
            "size {size}"
        );
        assert_eq!((device.next_avail(), device.next_used()), (end, end));
    }
}

#[test]
fn chains_go_round_in_order_across_two_threads() {
    for (size, total) in RUNS {
        let (mem, mut driver, mut device) = queues(size, feature(VIRTIO_F_VERSION_1));
        let device_mem = Arc::clone(&mem);
        let device_end = std::thread::scope(|scope| {
            // The device thread ends once it has served `total` chains; the
            // driver offers all of them, so each wait is for progress the
            // other thread makes.
            let device_thread = scope.spawn(move || {
                let mut chain = PackedChain::new();
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
                (device.next_avail(), device.next_used())
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
            let end = requester.end();
            assert_eq!((driver.next_avail(), driver.last_used()), (end, end));
            (device_thread.join().unwrap(), end)
        });
        let ((avail, used), end) = device_end;
        assert_eq!((avail, used), (end, end), "size {size}");
        assert_eq!(driver.num_free(), size as u16, "size {size}");
        assert_eq!(driver.in_flight(), 0);
        assert_eq!(driver.stats().reclaimed, total);
    }
}

/// A driver that writes whatever it is told, straight into the ring, each
/// descriptor made available on its lap.
struct RawDriver {
    mem: Arc<GuestMemory>,
    layout: PackedLayout,
    next: RingPosition,
}

impl RawDriver {
    /// Writes a chain of descriptors (flags without the marking) at the
    /// driver's position, the head's flags last.
    fn offer(&mut self, descs: &[PackedDescriptor]) -> RingPosition {
        let start = self.next;
        let size = self.layout.size();
        for (i, d) in descs.iter().enumerate().rev() {
            let at = start.advance(i as u16, size);
            let body = d.to_bytes();
            self.mem
                .write_from(self.layout.desc(at.index), &body[..14])
                .unwrap();
            self.mem
                .store_u16(
                    self.layout.desc_flags(at.index),
                    d.flags | avail_marking(at.wrap),
                    Ordering::Release,
                )
                .unwrap();
        }
        self.next = start.advance(descs.len() as u16, size);
        start
    }

    /// The used descriptor at `at`: (id, len), or None when not used.
    fn used(&self, at: RingPosition) -> Option<(u16, u32)> {
        let d = PackedDescriptor::from_bytes(
            bytes(&self.mem, self.layout.desc(at.index), 16)
                .try_into()
                .unwrap(),
        );
        is_used(d.flags, at.wrap).then_some((d.id, d.len))
    }

    fn put_table(&self, table: u64, i: u64, d: PackedDescriptor) {
        self.mem.write_from(table + 16 * i, &d.to_bytes()).unwrap();
    }
}

fn raw_device(size: u32, features: u64) -> (RawDriver, PackedDeviceQueue) {
    let mem = memory();
    let layout = PackedLayout::contiguous(RING, size).unwrap();
    let device = PackedDeviceQueue::new(Arc::clone(&mem), layout, features).unwrap();
    (
        RawDriver {
            mem,
            layout,
            next: RingPosition::START,
        },
        device,
    )
}

/// A descriptor, briefly.
fn desc(addr: u64, len: u32, id: u16, flags: u16) -> PackedDescriptor {
    PackedDescriptor {
        addr,
        len,
        id,
        flags,
    }
}

/// A malformed chain: a name, the indirect table entries to write at
/// [`TABLES`], the ring descriptors, the reason.
type Case = (
    &'static str,
    Vec<PackedDescriptor>,
    Vec<PackedDescriptor>,
    ChainErrorReason,
);

#[test]
fn malformed_chains_are_refused_returned_and_counted_and_the_queue_goes_on() {
    use ChainErrorReason::*;
    let size = 4u16;
    let cases: Vec<Case> = vec![
        (
            "a chain going on past the queue size",
            vec![],
            vec![desc(DATA, 8, 5, NEXT); 4],
            TooLong,
        ),
        (
            "buffer below memory",
            vec![],
            vec![desc(DATA, 8, 0, NEXT), desc(0x1000, 8, 6, 0)],
            OutsideMemory,
        ),
        (
            "buffer crossing the end",
            vec![],
            vec![desc(BASE + MEM_LEN as u64 - 4, 8, 7, 0)],
            OutsideMemory,
        ),
        (
            "buffer wrapping the address space",
            vec![],
            vec![desc(u64::MAX - 2, 8, 1, 0)],
            OutsideMemory,
        ),
        (
            "indirect table of 24 bytes",
            vec![],
            vec![desc(TABLES, 24, 2, INDIRECT)],
            IndirectBadLength,
        ),
        (
            "empty indirect table",
            vec![],
            vec![desc(TABLES, 0, 3, INDIRECT)],
            IndirectBadLength,
        ),
        (
            "indirect with next",
            vec![desc(DATA, 8, 0, 0)],
            vec![desc(TABLES, 16, 0, INDIRECT | NEXT), desc(DATA, 8, 9, 0)],
            IndirectWithNext,
        ),
        (
            "indirect table outside memory",
            vec![],
            vec![desc(0x10, 16, 1, INDIRECT)],
            OutsideMemory,
        ),
        (
            "indirect table longer than the queue",
            vec![desc(DATA, 8, 0, 0); 5],
            vec![desc(TABLES, 80, 2, INDIRECT)],
            TooLong,
        ),
        (
            "indirect after a direct descriptor",
            vec![desc(DATA, 8, 0, 0)],
            vec![desc(DATA, 8, 0, NEXT), desc(TABLES, 16, 3, INDIRECT)],
            IndirectWithNext,
        ),
        (
            "buffer in an indirect table outside memory",
            vec![desc(DATA, 8, 0, 0), desc(0x10, 8, 0, 0)],
            vec![desc(TABLES, 32, 0, INDIRECT)],
            OutsideMemory,
        ),
        (
            "readable after writable",
            vec![],
            vec![desc(DATA, 8, 0, WRITE | NEXT), desc(DATA, 8, 1, 0)],
            ReadableAfterWritable,
        ),
        (
            "readable after writable in an indirect table",
            vec![desc(DATA, 8, 0, WRITE), desc(DATA, 8, 0, 0)],
            vec![desc(TABLES, 32, 2, INDIRECT)],
            ReadableAfterWritable,
        ),
    ];
    let (mut driver, mut device) = raw_device(u32::from(size), feature(VIRTIO_F_INDIRECT_DESC));
    for (n, (name, table, ring, reason)) in cases.iter().enumerate() {
        for (i, d) in table.iter().enumerate() {
            driver.put_table(TABLES, i as u64, *d);
        }
        let id = ring.last().unwrap().id;
        let at = driver.offer(ring);
        assert_eq!(
            device.pop_avail(),
            Err(VirtioError::Chain(ChainError {
                head: id,
                reason: *reason
            })),
            "{name}"
        );
        assert_eq!(
            device.stats().bad(*reason) as usize,
            cases[..=n].iter().filter(|c| c.3 == *reason).count()
        );
        assert_eq!(device.next_avail(), driver.next, "{name}: moved past it");
        assert_eq!(driver.used(at), None, "{name}: not yet published");
        device.publish_used().unwrap();
        assert_eq!(
            driver.used(at),
            Some((id, 0)),
            "{name}: returned with its id and length 0"
        );
        assert_eq!(device.next_used(), driver.next);

        // The queue goes on: a good chain after it is taken.
        let at = driver.offer(&[desc(DATA, 8, 3, 0)]);
        let chain = device.pop_avail().unwrap().expect("the good chain");
        assert_eq!(chain.segments(), [readable(DATA, 8)], "{name}");
        device.push_used(chain.id(), chain.descs(), 0).unwrap();
        device.publish_used().unwrap();
        assert_eq!(driver.used(at), Some((3, 0)));
        assert_eq!(device.pop_avail(), Ok(None));
    }
    assert_eq!(device.stats().bad_total(), cases.len() as u64);
    assert_eq!(device.stats().chains, cases.len() as u64);
    assert_eq!(device.in_flight(), 0);

    // In an indirect table only WRITE counts: NEXT, INDIRECT and ids are
    // ignored.
    driver.put_table(TABLES, 0, desc(DATA, 8, 77, NEXT | INDIRECT));
    driver.put_table(TABLES, 1, desc(DATA + 8, 8, 78, WRITE | NEXT));
    driver.offer(&[desc(TABLES, 32, 1, INDIRECT)]);
    let chain = device.pop_avail().unwrap().unwrap();
    assert_eq!(chain.segments(), [readable(DATA, 8), writable(DATA + 8, 8)]);
    assert_eq!((chain.id(), chain.descs()), (1, 1));

    // Indirect descriptors without the feature.
    let (mut driver, mut device) = raw_device(4, 0);
    driver.put_table(TABLES, 0, desc(DATA, 8, 0, 0));
    driver.offer(&[desc(TABLES, 16, 2, INDIRECT)]);
    assert_eq!(
        device.pop_avail(),
        Err(VirtioError::Chain(ChainError {
            head: 2,
            reason: IndirectNotNegotiated
        }))
    );
}

#[test]
fn the_device_refuses_impossible_returns() {
    let (mut driver, mut device) = raw_device(4, 0);
    assert_eq!(device.push_used(0, 1, 0), Err(VirtioError::NothingInFlight));
    driver.offer(&[desc(DATA, 8, 0, NEXT), desc(DATA, 8, 0, 0)]);
    let chain = device.pop_avail().unwrap().unwrap();
    assert_eq!(chain.descs(), 2);
    for descs in [0, 3] {
        assert_eq!(
            device.push_used(chain.id(), descs, 0),
            Err(VirtioError::BadUsedDescriptors {
                descs,
                in_flight: 2
            })
        );
    }
    assert_eq!(device.in_flight(), 1);
    assert_eq!(device.next_used(), RingPosition::START, "nothing written");
    assert!(
        PackedDeviceQueue::with_position(
            Arc::clone(&driver.mem),
            driver.layout,
            0,
            position(4, true)
        )
        .is_err()
    );
}

#[test]
fn a_device_resumed_at_a_position_takes_from_there() {
    let mem = memory();
    let layout = PackedLayout::contiguous(RING, 3).unwrap();
    let mut driver = PackedDriverQueue::new(Arc::clone(&mem), layout, 0).unwrap();
    // Four chains go round with one device; another takes over after.
    let mut first = PackedDeviceQueue::new(Arc::clone(&mem), layout, 0).unwrap();
    for _ in 0..4 {
        driver.add_chain(&[readable(DATA, 8)]).unwrap();
        driver.publish_avail().unwrap();
        let chain = first.pop_avail().unwrap().unwrap();
        first.push_used(chain.id(), 1, 0).unwrap();
        first.publish_used().unwrap();
        assert!(driver.pop_used().unwrap().is_some());
    }
    let base = first.next_avail().to_off_wrap();
    assert_eq!(base, 1, "index 1, wrap counter 0");
    let mut second = PackedDeviceQueue::with_position(
        Arc::clone(&mem),
        layout,
        0,
        RingPosition::from_off_wrap(base),
    )
    .unwrap();
    let id = driver.add_chain(&[readable(DATA, 8)]).unwrap();
    driver.publish_avail().unwrap();
    let chain = second.pop_avail().unwrap().unwrap();
    second.push_used(chain.id(), 1, 0).unwrap();
    second.publish_used().unwrap();
    assert_eq!(driver.pop_used().unwrap(), Some(Used { head: id, len: 0 }));
}

#[test]
fn bad_used_descriptors_are_errors_counted_and_never_reclaim_twice() {
    let (mem, mut driver, _device) = queues(4, 0);
    let layout = *driver.layout();
    let id = driver
        .add_chain(&[readable(DATA, 8), writable(DATA + 64, 16)])
        .unwrap();
    driver.publish_avail().unwrap();
    // Plays a device writing used descriptors at positions it chooses.
    let post = |at: RingPosition, id: u16, len: u32| {
        let mut raw = [0u8; 6];
        raw[..4].copy_from_slice(&len.to_le_bytes());
        raw[4..].copy_from_slice(&id.to_le_bytes());
        mem.write_from(layout.desc(at.index) + 8, &raw).unwrap();
        let written = if len > 0 { WRITE } else { 0 };
        mem.store_u16(
            layout.desc_flags(at.index),
            used_marking(at.wrap) | written,
            Ordering::Release,
        )
        .unwrap();
    };
    // An id past the table: skipped as one descriptor.
    post(position(0, true), 9, 0);
    assert_eq!(driver.pop_used(), Err(VirtioError::BadUsedId { id: 9 }));
    assert_eq!(driver.last_used(), position(1, true));
    // An id not in flight: the same.
    post(position(1, true), id + 1, 0);
    assert_eq!(driver.pop_used(), Err(VirtioError::BadUsedId { id: 1 }));
    assert_eq!(driver.pop_used(), Ok(None));
    assert_eq!(driver.num_free(), 2, "the chain is still in flight");
    // A length past the writable bytes: reclaimed, reported.
    post(position(2, true), id, 17);
    assert_eq!(
        driver.pop_used(),
        Err(VirtioError::BadUsedLen {
            head: id,
            len: 17,
            writable: 16
        })
    );
    assert_eq!((driver.num_free(), driver.in_flight()), (4, 0));
    assert_eq!(driver.last_used(), position(0, false), "skipped its two");
    // A used descriptor with nothing in flight: nothing taken.
    post(position(0, false), id, 0);
    for _ in 0..2 {
        assert_eq!(driver.pop_used(), Err(VirtioError::NothingInFlight));
    }
    assert_eq!(driver.num_free(), 4, "never reclaimed twice");
    let stats = driver.stats();
    assert_eq!(
        (stats.bad_used_ids, stats.bad_used_lens, stats.index_errors),
        (2, 1, 2)
    );
    assert_eq!(stats.reclaimed, 1);
}

#[test]
fn event_passed_follows_the_positions_and_their_laps() {
    let size = 8;
    let p = position;
    // (event, old, new, notify?)
    let cases = [
        (p(0, true), p(0, true), p(1, true), true),
        (p(1, true), p(0, true), p(1, true), false),
        (p(3, true), p(2, true), p(6, true), true),
        (p(5, true), p(2, true), p(6, true), true),
        (p(6, true), p(2, true), p(6, true), false),
        (p(1, true), p(2, true), p(6, true), false),
        // Across the end: old on lap 1, new on lap 0.
        (p(7, true), p(6, true), p(2, false), true),
        (p(0, false), p(6, true), p(2, false), true),
        (p(1, false), p(6, true), p(2, false), true),
        (p(2, false), p(6, true), p(2, false), false),
        (p(5, true), p(6, true), p(2, false), false),
        (p(3, false), p(6, true), p(2, false), false),
    ];
    for (event, old, new, want) in cases {
        assert_eq!(
            event_passed(event, old, new, size),
            want,
            "event {event:?}, {old:?} -> {new:?}"
        );
    }
}

#[test]
fn with_event_idx_kicks_happen_exactly_when_the_event_is_passed() {
    let features = feature(VIRTIO_F_VERSION_1) | feature(VIRTIO_F_EVENT_IDX);
    let (_mem, mut driver, mut device) = queues(5, features);
    // The device asks for a kick when descriptor 2 is made available.
    device.set_kick_event(position(2, true)).unwrap();
    // (chains of one descriptor published in one batch, kick?)
    for (batch, want) in [(1, false), (1, false), (1, true), (1, false), (0, false)] {
        for _ in 0..batch {
            driver.add_chain(&[readable(DATA, 8)]).unwrap();
        }
        driver.publish_avail().unwrap();
        assert_eq!(driver.needs_kick().unwrap(), want);
    }
    // The device takes and returns all four, the driver reclaims them, and
    // the device waits: it asks for position 4 on lap 1.
    let mut taken = 0;
    while let Some(chain) = device.pop_avail().unwrap() {
        device.push_used(chain.id(), chain.descs(), 0).unwrap();
        taken += 1;
    }
    assert_eq!(taken, 4);
    device.publish_used().unwrap();
    while driver.pop_used().unwrap().is_some() {}
    assert!(!device.enable_notify().unwrap(), "nothing pending");
    // A batch of three, across the ring's end, passes position 4 at its start.
    for _ in 0..3 {
        driver.add_chain(&[readable(DATA, 8)]).unwrap();
    }
    driver.publish_avail().unwrap();
    assert_eq!(driver.next_avail(), position(2, false));
    assert!(driver.needs_kick().unwrap());
    assert!(device.enable_notify().unwrap(), "three pending");
    // An event on the next lap is not passed by one chain.
    device.set_kick_event(position(4, false)).unwrap();
    driver.add_chain(&[readable(DATA, 8)]).unwrap();
    driver.publish_avail().unwrap();
    assert!(!driver.needs_kick().unwrap());
}

#[test]
fn with_event_idx_notifications_happen_exactly_when_the_event_is_passed() {
    let features = feature(VIRTIO_F_VERSION_1) | feature(VIRTIO_F_EVENT_IDX);
    let (_mem, mut driver, mut device) = queues(16, features);
    for _ in 0..6 {
        driver
            .add_chain(&[readable(DATA, 8), writable(DATA + 8, 8)])
            .unwrap();
    }
    driver.publish_avail().unwrap();
    // The driver asks for a notification when used position 3 is passed:
    // inside the second chain's two descriptors.
    driver.set_used_event(position(3, true)).unwrap();
    for (batch, want) in [(1, false), (1, true), (1, false), (0, false)] {
        for _ in 0..batch {
            let chain = device.pop_avail().unwrap().unwrap();
            device.push_used(chain.id(), chain.descs(), 0).unwrap();
        }
        device.publish_used().unwrap();
        assert_eq!(device.needs_notify().unwrap(), want);
    }
    // The driver reclaims the three and waits for more: notified at the next.
    while driver.pop_used().unwrap().is_some() {}
    assert!(!driver.enable_interrupts().unwrap());
    let chain = device.pop_avail().unwrap().unwrap();
    device.push_used(chain.id(), chain.descs(), 0).unwrap();
    device.publish_used().unwrap();
    assert!(device.needs_notify().unwrap());
    assert!(driver.enable_interrupts().unwrap(), "one pending");
}

#[test]
fn without_event_idx_the_event_flags_suppress_notifications() {
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
    device.push_used(chain.id(), 1, 0).unwrap();
    device.publish_used().unwrap();
    assert!(!device.needs_notify().unwrap(), "the driver polls");
    assert!(driver.enable_interrupts().unwrap(), "one pending");
    let chain = device.pop_avail().unwrap().unwrap();
    device.push_used(chain.id(), 1, 0).unwrap();
    device.publish_used().unwrap();
    assert!(device.needs_notify().unwrap());
    assert!(!device.needs_notify().unwrap(), "nothing new published");
    // DESC without EVENT_IDX negotiated is taken as ENABLE.
    device.set_kick_event(position(7, true)).unwrap();
    driver.add_chain(&[readable(DATA, 8)]).unwrap();
    driver.publish_avail().unwrap();
    assert!(driver.needs_kick().unwrap());
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
    /// sequences against a model of a queue — chains added, published,
    /// held by the device, returned, published back — on rings of any size
    /// from 1 to 12: every chain arrives with its buffers, comes back once
    /// with its length, and every descriptor is free at the end.
    #[test]
    fn random_exchanges_match_the_model(
        size in 1u32..13,
        indirect in any::<bool>(),
        ops in proptest::collection::vec(op(), 1..300),
    ) {
        let features = if indirect { feature(VIRTIO_F_INDIRECT_DESC) } else { 0 };
        let (_mem, mut driver, mut device) = queues(size, features);
        let mut added: Vec<(u16, Vec<Segment>)> = Vec::new();
        let mut avail: VecDeque<(u16, Vec<Segment>)> = VecDeque::new();
        let mut held: Vec<PackedChain> = Vec::new();
        let mut returned: Vec<Used> = Vec::new();
        let mut used: VecDeque<Used> = VecDeque::new();
        // Ring descriptors in flight per buffer id.
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
                        let id = result.unwrap();
                        prop_assert!(u32::from(id) < size);
                        prop_assert_eq!(descs_of[usize::from(id)], 0, "id in use");
                        descs_of[usize::from(id)] = need;
                        descs_in_flight += need;
                        added.push((id, segments));
                    }
                }
                Op::Publish => {
                    driver.publish_avail().unwrap();
                    avail.extend(added.drain(..));
                }
                Op::Take => match device.pop_avail().unwrap() {
                    Some(chain) => {
                        let (id, segments) = avail.pop_front().expect("the model has one");
                        prop_assert_eq!(chain.id(), id);
                        prop_assert_eq!(u32::from(chain.descs()), descs_of[usize::from(id)]);
                        prop_assert_eq!(chain.segments(), &segments[..]);
                        held.push(chain);
                    }
                    None => prop_assert!(avail.is_empty()),
                },
                Op::Return(at) => {
                    if !held.is_empty() {
                        let chain = held.remove(at % held.len());
                        let len = chain.writable_len().min(5) as u32;
                        device.push_used(chain.id(), chain.descs(), len).unwrap();
                        returned.push(Used { head: chain.id(), len });
                    } else {
                        prop_assert_eq!(device.push_used(0, 1, 0), Err(VirtioError::NothingInFlight));
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
            prop_assert_eq!(chain.id(), avail.pop_front().unwrap().0);
            held.push(chain);
        }
        prop_assert!(avail.is_empty());
        for chain in held.drain(..) {
            device.push_used(chain.id(), chain.descs(), 0).unwrap();
            returned.push(Used { head: chain.id(), len: 0 });
        }
        device.publish_used().unwrap();
        used.extend(returned.drain(..));
        while let Some(u) = driver.pop_used().unwrap() {
            prop_assert_eq!(Some(u), used.pop_front());
        }
        prop_assert!(used.is_empty());
        prop_assert_eq!(u32::from(driver.num_free()), size);
        prop_assert_eq!(driver.in_flight(), 0);
        prop_assert_eq!(device.in_flight(), 0);
        prop_assert_eq!(device.stats().bad_total(), 0);
        prop_assert_eq!(driver.next_avail(), driver.last_used());
        prop_assert_eq!(device.next_avail(), device.next_used());
        prop_assert_eq!(driver.next_avail(), device.next_avail());
    }
}

#[test]
fn a_used_length_counts_only_with_the_write_flag() {
    let (mem, mut driver, mut device) = queues(4, 0);
    let layout = *driver.layout();
    let id = driver.add_chain(&[writable(DATA, 16)]).unwrap();
    driver.publish_avail().unwrap();
    let chain = device.pop_avail().unwrap().unwrap();
    device.push_used(chain.id(), 1, 0).unwrap();
    device.publish_used().unwrap();
    assert_eq!(
        bytes(&mem, layout.desc_flags(0), 2),
        [0x80, 0x80],
        "no WRITE"
    );
    // A stale length left in the descriptor is not the bytes written.
    mem.write_from(layout.desc(0) + 8, &9u32.to_le_bytes())
        .unwrap();
    assert_eq!(driver.pop_used().unwrap(), Some(Used { head: id, len: 0 }));
}

#[test]
fn retreat_undoes_advance_across_the_wrap() {
    for size in [1u16, 3, 8, 256] {
        for index in 0..size {
            for wrap in [false, true] {
                for n in 0..=size {
                    let at = position(index, wrap);
                    assert_eq!(
                        at.advance(n, size).retreat(n, size),
                        at,
                        "{size} {at:?} {n}"
                    );
                }
            }
        }
    }
}

#[test]
fn chains_given_back_are_taken_again_as_the_driver_left_them() {
    let (mem, mut driver, mut device) = queues(8, feature(VIRTIO_F_VERSION_1));
    let mut chain = PackedChain::new();
    // Rounds of three chains of one, two and one descriptors: the ring of
    // eight wraps every few rounds, so the device's position is given back
    // across the wrap too.
    for round in 0..20u64 {
        let addr = DATA;
        let mut ids = Vec::new();
        for descs in [1u32, 2, 1] {
            let segments: Vec<Segment> = (0..descs)
                .map(|i| writable(addr + u64::from(i) * 64, 64))
                .collect();
            ids.push(driver.add_chain(&segments).unwrap());
        }
        driver.publish_avail().unwrap();
        let mut taken = Vec::new();
        while device.pop_avail_into(&mut chain).unwrap() {
            taken.push((chain.id(), chain.descs()));
        }
        assert_eq!(
            taken.iter().map(|t| t.0).collect::<Vec<_>>(),
            ids,
            "round {round}"
        );
        let before = device.next_avail();
        // The last two go back; taking again finds them.
        device
            .untake(2, u32::from(taken[1].1 + taken[2].1))
            .unwrap();
        assert_eq!(device.in_flight(), 1);
        assert!(device.untake(2, 3).is_err(), "only one in flight");
        let mut again = Vec::new();
        while device.pop_avail_into(&mut chain).unwrap() {
            again.push((chain.id(), chain.descs()));
        }
        assert_eq!(again, taken[1..], "round {round}");
        assert_eq!(device.next_avail(), before);
        for &(id, descs) in &taken {
            device.push_used(id, descs, 0).unwrap();
        }
        device.publish_used().unwrap();
        let mut back = Vec::new();
        while let Some(used) = driver.pop_used().unwrap() {
            back.push(used.head);
        }
        assert_eq!(back, ids);
    }
    assert_eq!(device.in_flight(), 0);
    assert_eq!(device.stats().chains, 60, "a chain given back counts once");
    assert_eq!(driver.num_free(), 8);
    drop(mem);
}

/// The ids of the used descriptors when a refused chain follows one in
/// flight: with `VIRTIO_F_IN_ORDER` the refused chain waits in the ring
/// for it, without it goes back at once.
fn returns_around_a_refused_chain(features: u64) -> Vec<u16> {
    let (mut d, mut device) = raw_device(8, features);
    d.offer(&[desc(DATA, 16, 10, 0)]);
    // A buffer below memory.
    d.offer(&[desc(0x1000, 8, 11, 0)]);
    let mut first = PackedChain::new();
    let mut chain = PackedChain::new();
    assert_eq!(device.pop_avail_into(&mut first), Ok(true));
    match device.pop_avail_into(&mut chain) {
        Err(VirtioError::Chain(e)) => assert_eq!(e.head, 11),
        Ok(false) => {
            assert_eq!(device.stats().bad_total(), 0, "not refused yet");
            device.push_used(first.id(), first.descs(), 0).unwrap();
            assert!(matches!(
                device.pop_avail_into(&mut chain),
                Err(VirtioError::Chain(ChainError { head: 11, .. }))
            ));
        }
        other => panic!("{other:?}"),
    }
    if device.in_flight() == 1 {
        device.push_used(first.id(), first.descs(), 0).unwrap();
    }
    device.publish_used().unwrap();
    assert_eq!(device.in_flight(), 0);
    assert_eq!(device.stats().bad_total(), 1);
    // Each chain took one descriptor: the used ones are the first two.
    let at = RingPosition::START;
    [at, at.advance(1, 8)]
        .into_iter()
        .map(|at| d.used(at).expect("used").0)
        .collect()
}

#[test]
fn with_in_order_a_refused_chain_goes_back_after_the_chains_taken_before_it() {
    assert_eq!(
        returns_around_a_refused_chain(feature(VIRTIO_F_IN_ORDER)),
        vec![10, 11]
    );
    assert_eq!(returns_around_a_refused_chain(0), vec![11, 10]);
}
