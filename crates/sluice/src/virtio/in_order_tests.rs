//! Tests of the split virtqueue's driver side with `VIRTIO_F_IN_ORDER`:
//! descriptors taken in table order with wrap, used entries that stand for
//! batches, bad entries, and random sequences of add, complete (one entry
//! per chain or one per batch) and reclaim against a model.

use std::collections::VecDeque;
use std::sync::Arc;

use proptest::prelude::*;

use super::memory::{GuestMemory, Mapping};
use super::split::*;
use super::*;
use crate::sync::Ordering;

/// Where the test memory starts.
const BASE: u64 = 0x20_0000;
const MEM_LEN: usize = 1 << 20;
/// Where the rings go.
const RINGS: u64 = BASE;
/// Where buffers go.
const DATA: u64 = BASE + 0x8_0000;

const IN_ORDER: u64 = 1 << VIRTIO_F_IN_ORDER;

/// A device that reads the rings straight from memory and returns chains
/// in the order they were made available, one used entry per chain or one
/// per batch (the entry in the batch's first slot, the index moved by the
/// batch's size).
struct InOrderDevice {
    mem: Arc<GuestMemory>,
    layout: QueueLayout,
    last_avail: u16,
    used_idx: u16,
    /// Heads taken and not yet returned, oldest first.
    taken: VecDeque<u16>,
}

impl InOrderDevice {
    fn new(mem: &Arc<GuestMemory>, layout: QueueLayout) -> InOrderDevice {
        InOrderDevice {
            mem: Arc::clone(mem),
            layout,
            last_avail: 0,
            used_idx: 0,
            taken: VecDeque::new(),
        }
    }

    /// Takes the next available head, if the driver published one.
    fn take(&mut self) -> Option<u16> {
        let idx = self
            .mem
            .load_u16(self.layout.avail_idx(), Ordering::Acquire)
            .unwrap();
        if idx == self.last_avail {
            return None;
        }
        let head = self
            .mem
            .load_u16(self.layout.avail_entry(self.last_avail), Ordering::Relaxed)
            .unwrap();
        self.last_avail = self.last_avail.wrapping_add(1);
        self.taken.push_back(head);
        Some(head)
    }

    fn write_entry(&self, slot: u16, id: u32, len: u32) {
        let mut e = [0u8; 8];
        e[..4].copy_from_slice(&id.to_le_bytes());
        e[4..].copy_from_slice(&len.to_le_bytes());
        self.mem
            .write_from(self.layout.used_entry(slot), &e)
            .unwrap();
    }

    /// Returns the `n` oldest chains taken, the last with `len` (the others
    /// with theirs from `len_of`), as one entry or one entry each, and
    /// publishes them.
    fn complete(&mut self, n: usize, batched: bool, len: u32, len_of: impl Fn(u16) -> u32) {
        let heads: Vec<u16> = self.taken.drain(..n).collect();
        if batched {
            self.write_entry(self.used_idx, u32::from(heads[n - 1]), len);
            self.used_idx = self.used_idx.wrapping_add(n as u16);
        } else {
            for (i, &head) in heads.iter().enumerate() {
                let l = if i + 1 == n { len } else { len_of(head) };
                self.write_entry(self.used_idx, u32::from(head), l);
                self.used_idx = self.used_idx.wrapping_add(1);
            }
        }
        self.publish();
    }

    fn publish(&self) {
        self.mem
            .store_u16(self.layout.used_idx(), self.used_idx, Ordering::Release)
            .unwrap();
    }
}

fn queues(size: u32) -> (Arc<GuestMemory>, DriverQueue, InOrderDevice) {
    let mem =
        Arc::new(GuestMemory::new(vec![(BASE, Mapping::anonymous(MEM_LEN).unwrap())]).unwrap());
    let layout = QueueLayout::contiguous(RINGS, size).unwrap();
    let driver = DriverQueue::new(Arc::clone(&mem), layout, IN_ORDER).unwrap();
    let device = InOrderDevice::new(&mem, layout);
    (mem, driver, device)
}

fn segment(addr: u64, len: u32, writable: bool) -> Segment {
    Segment {
        addr,
        len,
        writable,
    }
}

fn descriptor(mem: &GuestMemory, layout: &QueueLayout, i: u16) -> Descriptor {
    let mut b = [0u8; 16];
    mem.read_into(layout.desc(i), &mut b).unwrap();
    Descriptor::from_bytes(b)
}

#[test]
fn descriptors_go_round_the_table_in_order_and_chains_link_to_the_next() {
    let (mem, mut driver, mut device) = queues(4);
    let layout = *driver.layout();
    assert!(driver.in_order());
    // Three one-descriptor chains: heads 0, 1, 2, in ring slots 0, 1, 2.
    for i in 0..3u16 {
        let head = driver
            .add_buffer(
                &mem.area(DATA, 0x1000).unwrap(),
                DATA + 64 * u64::from(i),
                64,
                true,
            )
            .unwrap();
        assert_eq!(head, i);
    }
    driver.publish_avail().unwrap();
    for i in 0..3 {
        assert_eq!(device.take(), Some(i));
    }
    device.complete(1, false, 10, |_| 0);
    assert_eq!(driver.pop_used(), Ok(Some(Used { head: 0, len: 10 })));
    // A chain of two readable and one writable: descriptors 3, 0, 1 (the
    // table wraps), each linking to the next in table order.
    device.complete(2, false, 20, |_| 64);
    assert_eq!(driver.pop_used(), Ok(Some(Used { head: 1, len: 64 })));
    assert_eq!(driver.pop_used(), Ok(Some(Used { head: 2, len: 20 })));
    let head = driver
        .add_chain(&[
            segment(DATA, 8, false),
            segment(DATA + 8, 8, false),
            segment(DATA + 16, 32, true),
        ])
        .unwrap();
    assert_eq!(head, 3);
    assert_eq!(descriptor(&mem, &layout, 3).next, 0);
    assert_eq!(descriptor(&mem, &layout, 3).flags, VIRTQ_DESC_F_NEXT);
    assert_eq!(descriptor(&mem, &layout, 0).next, 1);
    assert_eq!(
        descriptor(&mem, &layout, 1).flags,
        VIRTQ_DESC_F_WRITE,
        "the last has no NEXT"
    );
    assert_eq!(driver.num_free(), 1);
    driver.publish_avail().unwrap();
    assert_eq!(device.take(), Some(3));
    device.complete(1, true, 32, |_| 0);
    assert_eq!(driver.pop_used(), Ok(Some(Used { head: 3, len: 32 })));
    assert_eq!(driver.pop_used(), Ok(None));
    assert_eq!((driver.num_free(), driver.in_flight()), (4, 0));
    // The next chain starts where that one ended.
    let head = driver.add_chain(&[segment(DATA, 8, false)]).unwrap();
    assert_eq!(head, 2);
}

#[test]
fn one_used_entry_returns_the_whole_batch_before_it() {
    let (_mem, mut driver, mut device) = queues(8);
    // Tx-like chains (nothing writable) and one with a writable buffer.
    for i in 0..5u64 {
        driver
            .add_chain(&[segment(DATA + 64 * i, 60, false)])
            .unwrap();
    }
    driver
        .add_chain(&[segment(DATA, 12, false), segment(DATA + 512, 100, true)])
        .unwrap();
    driver.publish_avail().unwrap();
    while device.take().is_some() {}
    // One entry for the first four: it names head 3, in used slot 0.
    device.complete(4, true, 0, |_| 0);
    for head in 0..4 {
        assert_eq!(driver.pop_used(), Ok(Some(Used { head, len: 0 })));
    }
    assert_eq!(driver.pop_used(), Ok(None));
    // One entry for the last two: the earlier one comes back with its
    // writable length (none), the named one with the entry's.
    device.complete(2, true, 70, |_| 0);
    assert_eq!(driver.pop_used(), Ok(Some(Used { head: 4, len: 0 })));
    assert_eq!(driver.pop_used(), Ok(Some(Used { head: 5, len: 70 })));
    assert_eq!(driver.pop_used(), Ok(None));
    assert_eq!((driver.num_free(), driver.in_flight()), (8, 0));
    assert_eq!(driver.stats().reclaimed, 6);
    // The next entries go on from used slot 6.
    let head = driver.add_chain(&[segment(DATA, 8, false)]).unwrap();
    assert_eq!(head, 7);
    driver.publish_avail().unwrap();
    device.take();
    device.complete(1, false, 0, |_| 0);
    assert_eq!(driver.pop_used(), Ok(Some(Used { head: 7, len: 0 })));
}

#[test]
fn bad_entries_in_order_are_counted_and_reclaim_nothing() {
    let (_mem, mut driver, mut device) = queues(8);
    for i in 0..3u64 {
        driver
            .add_chain(&[segment(DATA + 64 * i, 16, true)])
            .unwrap();
    }
    driver.publish_avail().unwrap();
    while device.take().is_some() {}
    // An id past the table, one not in flight, and one whose batch is
    // longer than the entries published: skipped, counted.
    for id in [99u32, 5, 2] {
        device.write_entry(device.used_idx, id, 0);
        device.used_idx = device.used_idx.wrapping_add(1);
        device.publish();
        assert_eq!(driver.pop_used(), Err(VirtioError::BadUsedId { id }));
    }
    assert_eq!((driver.in_flight(), driver.stats().bad_used_ids), (3, 3));
    // A length past the named chain's writable bytes: the batch comes back,
    // the named chain reported.
    device.write_entry(device.used_idx, 1, 17);
    device.used_idx = device.used_idx.wrapping_add(2);
    device.publish();
    assert_eq!(driver.pop_used(), Ok(Some(Used { head: 0, len: 16 })));
    assert_eq!(
        driver.pop_used(),
        Err(VirtioError::BadUsedLen {
            head: 1,
            len: 17,
            writable: 16
        })
    );
    assert_eq!(driver.in_flight(), 1);
    // An index past everything in flight: nothing taken.
    device.used_idx = device.used_idx.wrapping_add(5);
    device.publish();
    assert!(matches!(
        driver.pop_used(),
        Err(VirtioError::UsedIndexJump { .. })
    ));
    assert_eq!(driver.in_flight(), 1);
}

#[test]
fn available_entries_keep_their_values_once_chains_go_round() {
    let (mem, mut driver, mut device) = queues(16);
    let layout = *driver.layout();
    let area = mem.area(DATA, 0x10000).unwrap();
    // Four laps of one-descriptor chains: slot i always holds head i.
    for lap in 0..4u64 {
        for i in 0..16u64 {
            let head = driver
                .add_buffer(&area, DATA + 256 * i + lap, 100, true)
                .unwrap();
            assert_eq!(u64::from(head), i);
        }
        driver.publish_avail().unwrap();
        for i in 0..16u16 {
            assert_eq!(device.take(), Some(i));
            let entry = mem
                .load_u16(layout.avail_entry(i), Ordering::Relaxed)
                .unwrap();
            assert_eq!(entry, i);
        }
        device.complete(16, lap % 2 == 1, 50, |_| 50);
        for i in 0..16u16 {
            let want = if lap % 2 == 1 && i < 15 { 100 } else { 50 };
            assert_eq!(driver.pop_used(), Ok(Some(Used { head: i, len: want })));
        }
    }
    assert_eq!(driver.num_free(), 16);
}

#[test]
fn without_in_order_freed_descriptors_queue_up_behind_the_free_ones() {
    let mem =
        Arc::new(GuestMemory::new(vec![(BASE, Mapping::anonymous(MEM_LEN).unwrap())]).unwrap());
    let layout = QueueLayout::contiguous(RINGS, 4).unwrap();
    let mut driver = DriverQueue::new(Arc::clone(&mem), layout, 0).unwrap();
    let mut device = InOrderDevice::new(&mem, layout);
    assert!(!driver.in_order());
    let one = |driver: &mut DriverQueue| driver.add_chain(&[segment(DATA, 8, true)]).unwrap();
    // A device that returns chains in order: the heads go round the table
    // in order, lap after lap, as in ring slot order.
    for k in 0..12u16 {
        assert_eq!(one(&mut driver), k % 4);
        driver.publish_avail().unwrap();
        assert_eq!(device.take(), Some(k % 4));
        device.complete(1, false, 8, |_| 0);
        assert_eq!(
            driver.pop_used(),
            Ok(Some(Used {
                head: k % 4,
                len: 8
            }))
        );
    }
    // Out of order: the freed heads are taken again in the order they came
    // back, after the ones free before them.
    for _ in 0..3 {
        one(&mut driver);
    }
    driver.publish_avail().unwrap();
    while device.take().is_some() {}
    // The device returns head 2 (the third taken), then head 0.
    for (slot, id) in [(0u16, 2u32), (1, 0)] {
        device.write_entry(slot.wrapping_add(12), id, 0);
    }
    device.used_idx = 14;
    device.publish();
    assert_eq!(driver.pop_used(), Ok(Some(Used { head: 2, len: 0 })));
    assert_eq!(driver.pop_used(), Ok(Some(Used { head: 0, len: 0 })));
    let heads: Vec<u16> = (0..3).map(|_| one(&mut driver)).collect();
    assert_eq!(heads, [3, 2, 0]);
    assert_eq!(driver.num_free(), 0);
    // Without in order, the used index alone says nothing of which chains
    // came back: nothing is taken by it.
    device.write_entry(14, 3, 0);
    device.used_idx = 15;
    device.publish();
    assert_eq!(driver.pop_used_heads(&mut [0; 4]), Ok(0));
    assert_eq!(driver.pop_used(), Ok(Some(Used { head: 3, len: 0 })));
}

/// One step of a random exchange in order.
#[derive(Debug, Clone)]
enum Op {
    /// The driver adds a chain of this many readable and writable buffers.
    Add { readable: u8, writable: u8 },
    /// The driver publishes.
    Publish,
    /// The device takes what was published.
    Take,
    /// The device returns this many of the chains it took (modulo), in one
    /// entry or one each.
    Complete { count: usize, batched: bool },
    /// The driver reclaims up to this many chains.
    Reclaim(u8),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0u8..3, 0u8..3).prop_map(|(readable, writable)| Op::Add { readable, writable }),
        1 => Just(Op::Publish),
        1 => Just(Op::Take),
        2 => (any::<usize>(), any::<bool>())
            .prop_map(|(count, batched)| Op::Complete { count, batched }),
        2 => (1u8..8).prop_map(Op::Reclaim),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Random add, publish, take, complete (singly or in batches) and
    /// reclaim sequences (by entry, or by the used index alone), wrapping the table many times, against a model:
    /// chains use descriptors in table order, the device sees each head
    /// once and in order, each chain comes back once and in order with its
    /// length, and every descriptor is free at the end.
    #[test]
    fn random_in_order_exchanges_match_the_model(
        size_log in 0u32..5,
        by_index in any::<bool>(),
        ops in proptest::collection::vec(op(), 1..400),
    ) {
        let size = 1u16 << size_log;
        let (_mem, mut driver, mut device) = queues(u32::from(size));
        // The chains in flight, oldest first (head, descriptors, writable
        // bytes): `returned` came back and are not reclaimed, the next
        // `held` are the device's, the next `published` wait for it, the
        // rest are not published.
        let mut chains: VecDeque<(u16, u16, u32)> = VecDeque::new();
        let (mut returned, mut held, mut published) = (0usize, 0usize, 0usize);
        // What the driver gets back next, in order: (head, len).
        let mut expected: VecDeque<Used> = VecDeque::new();
        let mut next_desc = 0u16;
        let mut descs_in_flight = 0u16;
        let mut writable_of = vec![0u32; usize::from(size)];
        for op in ops {
            match op {
                Op::Add { readable: r, writable: w } => {
                    let segments: Vec<Segment> = (0..r + w)
                        .map(|i| segment(DATA + 64 * u64::from(i), 8 + u32::from(i), i >= r))
                        .collect();
                    let need = segments.len() as u16;
                    let result = driver.add_chain(&segments);
                    if segments.is_empty() {
                        prop_assert_eq!(result, Err(VirtioError::EmptyChain));
                    } else if need > size - descs_in_flight {
                        prop_assert!(
                            matches!(result, Err(VirtioError::NoFreeDescriptors { .. })),
                            "{:?}", result
                        );
                    } else {
                        let head = result.unwrap();
                        prop_assert_eq!(head, next_desc, "descriptors in table order");
                        next_desc = (next_desc + need) & (size - 1);
                        descs_in_flight += need;
                        let writable = segments.iter().filter(|s| s.writable).map(|s| s.len).sum();
                        writable_of[usize::from(head)] = writable;
                        chains.push_back((head, need, writable));
                    }
                }
                Op::Publish => {
                    driver.publish_avail().unwrap();
                    published = chains.len() - returned - held;
                }
                Op::Take => {
                    while let Some(head) = device.take() {
                        prop_assert!(published > 0, "only what was published");
                        prop_assert_eq!(head, chains[returned + held].0);
                        held += 1;
                        published -= 1;
                    }
                    prop_assert_eq!(published, 0);
                }
                Op::Complete { count, batched } => {
                    if held > 0 {
                        let n = count % held + 1;
                        let (last, _, writable) = chains[returned + n - 1];
                        let len = writable.min(5);
                        device.complete(n, batched, len, |h| writable_of[usize::from(h)]);
                        for i in 0..n {
                            let (head, _, writable) = chains[returned + i];
                            let len = if head == last { len } else { writable };
                            expected.push_back(Used { head, len });
                        }
                        returned += n;
                        held -= n;
                    }
                }
                Op::Reclaim(k) if !by_index => {
                    for _ in 0..k {
                        let got = driver.pop_used().unwrap();
                        let want = expected.pop_front();
                        prop_assert_eq!(got, want);
                        let Some(used) = want else { break };
                        let (head, descs, _) = chains.pop_front().unwrap();
                        prop_assert_eq!(head, used.head);
                        descs_in_flight -= descs;
                        returned -= 1;
                    }
                }
                Op::Reclaim(k) => {
                    let mut heads = vec![0u16; usize::from(k)];
                    let n = driver.pop_used_heads(&mut heads).unwrap();
                    prop_assert_eq!(n, usize::from(k).min(expected.len()));
                    for &head in &heads[..n] {
                        prop_assert_eq!(expected.pop_front().map(|u| u.head), Some(head));
                        let (h, descs, _) = chains.pop_front().unwrap();
                        prop_assert_eq!(h, head);
                        descs_in_flight -= descs;
                        returned -= 1;
                    }
                }
            }
            prop_assert_eq!(driver.num_free(), size - descs_in_flight);
            prop_assert_eq!(usize::from(driver.in_flight()), chains.len());
        }
        // Drain: everything comes back, every descriptor is free.
        driver.publish_avail().unwrap();
        while device.take().is_some() {}
        let held = device.taken.len();
        if held > 0 {
            device.complete(held, true, 0, |_| 0);
        }
        if by_index {
            let mut heads = vec![0u16; usize::from(size)];
            driver.pop_used_heads(&mut heads).unwrap();
        } else {
            // Bounded: one chain per call at most.
            for _ in 0..=size {
                if driver.pop_used().unwrap().is_none() {
                    break;
                }
            }
        }
        prop_assert_eq!(driver.num_free(), size);
        prop_assert_eq!(driver.in_flight(), 0);
        prop_assert_eq!(driver.stats().bad_used_ids + driver.stats().bad_used_lens, 0);
    }
}
