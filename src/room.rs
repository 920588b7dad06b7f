//! Room for collections that mostly hold one thing.
//!
//! A `VecDeque`'s first push makes room for four (std's smallest growth),
//! and a `HashMap`'s first insert room for four entries and their control
//! bytes. A session's resume ring and a connection's write queue hold one
//! frame at a time while the session is idle, and a session's audience is
//! mostly its one player: at tens of thousands of idle sessions the room
//! for the other three is a few hundred bytes a session.
//!
//! - [`push_back`]: a queue's first push makes room for one; from there the
//!   queue grows as std grows it, and keeps what it grew to.
//! - [`FewMap`]: a list while it holds a few entries, a hash map beyond.

use std::collections::{HashMap, VecDeque};
use std::hash::Hash;

/// Pushes `item` at the back of `queue`, making room for it alone when
/// `queue` has none.
pub fn push_back<T>(queue: &mut VecDeque<T>, item: T) {
    if queue.capacity() == 0 {
        queue.reserve_exact(1);
    }
    queue.push_back(item);
}

/// Entries a [`FewMap`] keeps in its list before it becomes a hash map.
const FEW: usize = 8;

/// A map for a few entries that may grow to many: a list, searched in
/// order, while it holds at most [`FEW`]; a hash map from the first entry
/// beyond, until it is cleared. Its order is no order.
pub enum FewMap<K, V> {
    Few(Vec<(K, V)>),
    Many(HashMap<K, V>),
}

impl<K, V> Default for FewMap<K, V> {
    fn default() -> Self {
        Self::Few(Vec::new())
    }
}

impl<K: Eq + Hash, V> FewMap<K, V> {
    /// Inserts `value` at `key`; answers the value it replaced.
    pub fn insert(&mut self, key: K, value: V) -> Option<V> {
        let few = match self {
            Self::Many(map) => return map.insert(key, value),
            Self::Few(few) => few,
        };
        if let Some((_, old)) = few.iter_mut().find(|(k, _)| *k == key) {
            return Some(std::mem::replace(old, value));
        }
        if few.len() < FEW {
            if few.capacity() == 0 {
                few.reserve_exact(1);
            }
            few.push((key, value));
        } else {
            let mut map: HashMap<K, V> = few.drain(..).collect();
            map.insert(key, value);
            *self = Self::Many(map);
        }
        None
    }

    pub fn remove(&mut self, key: &K) -> Option<V> {
        match self {
            Self::Few(few) => {
                let at = few.iter().position(|(k, _)| k == key)?;
                Some(few.swap_remove(at).1)
            }
            Self::Many(map) => map.remove(key),
        }
    }

    pub fn get(&self, key: &K) -> Option<&V> {
        match self {
            Self::Few(few) => few.iter().find(|(k, _)| k == key).map(|(_, v)| v),
            Self::Many(map) => map.get(key),
        }
    }

    pub fn len(&self) -> usize {
        match self {
            Self::Few(few) => few.len(),
            Self::Many(map) => map.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Forgets every entry, and the room they took.
    pub fn clear(&mut self) {
        *self = Self::default();
    }

    pub fn iter(&self) -> impl Iterator<Item = (&K, &V)> {
        let (few, many) = match self {
            Self::Few(few) => (Some(few.iter().map(|(k, v)| (k, v))), None),
            Self::Many(map) => (None, Some(map.iter())),
        };
        few.into_iter().flatten().chain(many.into_iter().flatten())
    }

    pub fn values(&self) -> impl Iterator<Item = &V> {
        self.iter().map(|(_, v)| v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_first_push_makes_room_for_one_and_later_ones_grow_it_in_order() {
        let mut queue = VecDeque::new();
        push_back(&mut queue, 1);
        assert_eq!(queue.capacity(), 1);
        for n in 2..=9 {
            push_back(&mut queue, n);
        }
        assert!(queue.capacity() >= 9);
        assert_eq!(
            queue.iter().copied().collect::<Vec<_>>(),
            (1..=9).collect::<Vec<_>>()
        );
        queue.clear();
        let kept = queue.capacity();
        push_back(&mut queue, 10);
        assert_eq!(queue.capacity(), kept, "room grown is kept");
    }

    #[test]
    fn a_few_map_answers_as_a_hash_map_before_and_after_it_grows_into_one() {
        let mut few = FewMap::default();
        let mut map = HashMap::new();
        // The most entries it held: it stays a hash map once it was one.
        let mut most = 0;
        let sorted = |few: &FewMap<u64, u64>| {
            let mut all: Vec<(u64, u64)> = few.iter().map(|(k, v)| (*k, *v)).collect();
            all.sort_unstable();
            all
        };
        for key in 0..20u64 {
            assert_eq!(few.insert(key, key * 10), map.insert(key, key * 10));
            assert_eq!(few.insert(key, key * 100), map.insert(key, key * 100));
            if key % 3 == 0 {
                assert_eq!(few.remove(&key), map.remove(&key));
                assert_eq!(few.remove(&key), None);
            }
            assert_eq!(few.len(), map.len());
            assert_eq!(few.get(&key), map.get(&key));
            let mut want: Vec<(u64, u64)> = map.iter().map(|(k, v)| (*k, *v)).collect();
            want.sort_unstable();
            assert_eq!(sorted(&few), want);
            most = most.max(map.len() + usize::from(key % 3 == 0));
            assert_eq!(matches!(few, FewMap::Many(_)), most > FEW, "after {key}");
        }
        assert_eq!(few.values().count(), map.len());
        few.clear();
        assert!(few.is_empty() && matches!(few, FewMap::Few(_)));
        assert_eq!(few.insert(1, 1), None);
        assert!(
            matches!(&few, FewMap::Few(list) if list.capacity() == 1),
            "room for one"
        );
    }
}
