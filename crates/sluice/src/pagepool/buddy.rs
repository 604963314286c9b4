//! The buddy allocator behind the block provider: the algorithm alone, no
//! locking and no memory (the provider holds it under a lock and maps page
//! numbers to addresses).
//!
//! # Algorithm
//!
//! The managed memory is `pages` pages of 4 KiB, numbered from 0. A block of
//! order `k` is `2^k` pages starting at a page number that is a multiple of
//! `2^k`; its *buddy* is the block of the same order at `start ^ 2^k` (the
//! other half of the block of order `k + 1` that contains both). Free blocks
//! sit in one doubly-linked list per order (`0..=TOP_ORDER`), threaded through
//! a per-page table of links, and each block's first page records its state
//! (free or allocated) and its order.
//!
//! - **Allocate order `k`:** take a block from the list of the smallest order
//!   `j >= k` that has one; while `j > k`, split it: the upper half (order
//!   `j - 1`) goes onto its list, the lower half is split further.
//! - **Free a block of order `k`:** while `k < TOP_ORDER` and the buddy is
//!   free *and of order `k`*, take the buddy off its list and merge (the
//!   merged block starts at the lower of the two); then put the result on its
//!   list.
//!
//! At start the memory is cut into the largest aligned blocks that fit, so a
//! page count that is not a multiple of `2^TOP_ORDER` simply leaves smaller
//! blocks at the end. Every operation is O(`TOP_ORDER`).

/// The largest block the allocator keeps (2 MiB, one hugepage); blocks
/// handed out are at most [`super::MAX_ORDER`], and the rest of the orders
/// exist so that a small allocation splits, and a free merges, for real.
pub const TOP_ORDER: u32 = 9;

const NIL: u32 = u32::MAX;
/// State byte: the page starts a free block (order in the low bits).
const FREE: u8 = 0x80;
/// State byte: the page starts an allocated block (order in the low bits).
const USED: u8 = 0x40;
const ORDER_MASK: u8 = 0x0f;

/// Links of a free block's first page in its order's list.
#[derive(Debug, Clone, Copy)]
struct Link {
    prev: u32,
    next: u32,
}

/// Operation counts of a buddy allocator.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BuddyCounts {
    /// Blocks split in two by allocations.
    pub splits: u64,
    /// Buddy pairs merged by frees.
    pub merges: u64,
}

/// A buddy allocator over page numbers `0..pages`.
#[derive(Debug)]
pub struct Buddy {
    /// Pages managed.
    pages: u32,
    /// First block of each order's free list, or `NIL`.
    heads: [u32; TOP_ORDER as usize + 1],
    /// Free blocks of each order (the lists' lengths).
    free_blocks: [u32; TOP_ORDER as usize + 1],
    /// Per page: its list links; meaningful only for the first page of a free
    /// block.
    links: Box<[Link]>,
    /// Per page: `FREE | order` or `USED | order` for the first page of a
    /// block, 0 for the pages inside one.
    state: Box<[u8]>,
    /// Pages in allocated blocks.
    used_pages: u32,
    counts: BuddyCounts,
}

impl Buddy {
    /// An allocator over `pages` pages, all free, cut into the largest
    /// aligned blocks.
    pub fn new(pages: u32) -> Buddy {
        let mut b = Buddy {
            pages,
            heads: [NIL; TOP_ORDER as usize + 1],
            free_blocks: [0; TOP_ORDER as usize + 1],
            links: vec![
                Link {
                    prev: NIL,
                    next: NIL
                };
                pages as usize
            ]
            .into_boxed_slice(),
            state: vec![0u8; pages as usize].into_boxed_slice(),
            used_pages: 0,
            counts: BuddyCounts::default(),
        };
        let mut p = 0u32;
        while p < pages {
            // The largest order aligned at `p` that fits before the end.
            let mut k = TOP_ORDER.min(p.trailing_zeros());
            while p + (1 << k) > pages {
                k -= 1;
            }
            b.push(p, k);
            p += 1 << k;
        }
        b
    }

    /// Pages managed.
    pub fn pages(&self) -> u32 {
        self.pages
    }

    /// Pages in allocated blocks.
    pub fn used_pages(&self) -> u32 {
        self.used_pages
    }

    /// Free blocks of each order.
    pub fn free_blocks(&self) -> [u32; TOP_ORDER as usize + 1] {
        self.free_blocks
    }

    /// Splits and merges so far.
    pub fn counts(&self) -> BuddyCounts {
        self.counts
    }

    /// Allocates a block of `order` (at most [`TOP_ORDER`]); its first page,
    /// or `None` when no free block is large enough.
    pub fn alloc(&mut self, order: u32) -> Option<u32> {
        debug_assert!(order <= TOP_ORDER);
        let mut j = order;
        while self.heads[j as usize] == NIL {
            j += 1;
            if j > TOP_ORDER {
                return None;
            }
        }
        let p = self.heads[j as usize];
        self.unlink(p, j);
        while j > order {
            j -= 1;
            // Keep the lower half, free the upper one.
            self.push(p + (1 << j), j);
            self.counts.splits += 1;
        }
        self.state[p as usize] = USED | order as u8;
        self.used_pages += 1 << order;
        Some(p)
    }

    /// The order of the allocated block starting at page `p`, or `None` when
    /// no allocated block starts there.
    pub fn allocated_order(&self, p: u32) -> Option<u32> {
        match self.state.get(p as usize) {
            Some(&s) if s & USED != 0 => Some((s & ORDER_MASK) as u32),
            _ => None,
        }
    }

    /// Frees the allocated block starting at page `p`, merging it with its
    /// free buddies. Returns its order, or `None` (and changes nothing) when
    /// no allocated block starts at `p`.
    pub fn free(&mut self, p: u32) -> Option<u32> {
        let order = self.allocated_order(p)?;
        self.state[p as usize] = 0;
        self.used_pages -= 1 << order;
        let (mut p, mut k) = (p, order);
        while k < TOP_ORDER {
            let buddy = p ^ (1 << k);
            if buddy >= self.pages || self.state[buddy as usize] != FREE | k as u8 {
                break;
            }
            self.unlink(buddy, k);
            self.state[buddy as usize] = 0;
            p = p.min(buddy);
            k += 1;
            self.counts.merges += 1;
        }
        self.push(p, k);
        Some(order)
    }

    /// Puts the free block at `p` of order `k` at the head of its list.
    fn push(&mut self, p: u32, k: u32) {
        let head = self.heads[k as usize];
        self.links[p as usize] = Link {
            prev: NIL,
            next: head,
        };
        if head != NIL {
            self.links[head as usize].prev = p;
        }
        self.heads[k as usize] = p;
        self.state[p as usize] = FREE | k as u8;
        self.free_blocks[k as usize] += 1;
    }

    /// Takes the free block at `p` of order `k` off its list.
    fn unlink(&mut self, p: u32, k: u32) {
        let Link { prev, next } = self.links[p as usize];
        if prev == NIL {
            self.heads[k as usize] = next;
        } else {
            self.links[prev as usize].next = next;
        }
        if next != NIL {
            self.links[next as usize].prev = prev;
        }
        self.free_blocks[k as usize] -= 1;
    }

    /// Checks every invariant (tests): lists and state bytes agree, blocks
    /// tile the pages, no two free buddies of one order are left unmerged.
    #[cfg(all(test, not(loom)))]
    pub fn check(&self) {
        let mut covered = vec![false; self.pages as usize];
        let mut free_pages = 0u32;
        for k in 0..=TOP_ORDER {
            let mut p = self.heads[k as usize];
            let mut prev = NIL;
            let mut n = 0;
            while p != NIL {
                assert_eq!(self.state[p as usize], FREE | k as u8, "page {p} order {k}");
                assert_eq!(self.links[p as usize].prev, prev);
                assert_eq!(p % (1 << k), 0, "misaligned block {p} of order {k}");
                for q in p..p + (1 << k) {
                    assert!(!covered[q as usize], "page {q} in two blocks");
                    covered[q as usize] = true;
                }
                if k < TOP_ORDER {
                    let buddy = p ^ (1 << k);
                    assert!(
                        buddy >= self.pages || self.state[buddy as usize] != FREE | k as u8,
                        "free buddies {p} and {buddy} of order {k} not merged"
                    );
                }
                free_pages += 1 << k;
                n += 1;
                prev = p;
                p = self.links[p as usize].next;
            }
            assert_eq!(n, self.free_blocks[k as usize]);
        }
        for (p, &s) in self.state.iter().enumerate() {
            if s & USED != 0 {
                let k = (s & ORDER_MASK) as usize;
                for (q, c) in covered.iter_mut().enumerate().skip(p).take(1 << k) {
                    assert!(!*c, "allocated page {q} also free");
                    *c = true;
                }
            }
        }
        assert!(
            covered.iter().all(|&c| c),
            "pages neither free nor allocated"
        );
        assert_eq!(free_pages + self.used_pages, self.pages);
    }
}
