//! Hash slots: which of the 16384 slots of a Valkey Cluster a key belongs to,
//! computed here the way every node does (CRC16/XMODEM of the key, or of its
//! `{hash tag}`, modulo 16384), so a test can pick keys for a shard without
//! asking a server (`CLUSTER KEYSLOT`).

/// How many hash slots a Valkey Cluster has.
pub const CLUSTER_SLOTS: u16 = 16384;

/// The hash slot of `key`, as `CLUSTER KEYSLOT` computes it.
///
/// Only the hash tag is hashed when the key has one: the bytes between the
/// first `{` and the first `}` after it, if there is at least one byte between
/// them. So `{user:1}.name` and `{user:1}.mail` share a slot, while `{}x` and
/// `x{` are hashed whole.
///
/// ```
/// use embedded_valkey::slot_of;
///
/// assert_eq!(slot_of(b"foo"), 12182);
/// assert_eq!(slot_of(b"{user:1}.name"), slot_of(b"{user:1}.mail"));
/// assert_eq!(slot_of(b"{user:1}.name"), slot_of(b"user:1"));
/// ```
pub fn slot_of(key: &[u8]) -> u16 {
    crc16(hash_tag(key)) % CLUSTER_SLOTS
}

/// The part of `key` that decides its slot: the hash tag, or the whole key.
fn hash_tag(key: &[u8]) -> &[u8] {
    let Some(open) = key.iter().position(|&byte| byte == b'{') else {
        return key;
    };
    let rest = &key[open + 1..];
    match rest.iter().position(|&byte| byte == b'}') {
        Some(len) if len > 0 => &rest[..len],
        _ => key,
    }
}

/// CRC16/XMODEM (polynomial 0x1021, initial value 0), the checksum Valkey
/// Cluster hashes keys with. Bit by bit: tests hash few keys, so no table.
fn crc16(bytes: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &byte in bytes {
        crc ^= u16::from(byte) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 == 0 {
                crc << 1
            } else {
                (crc << 1) ^ 0x1021
            };
        }
    }
    crc
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc16_matches_the_xmodem_check_value() {
        assert_eq!(crc16(b"123456789"), 0x31C3);
        assert_eq!(crc16(b""), 0);
    }

    #[test]
    fn slots_match_what_valkey_answers() {
        // Values from `CLUSTER KEYSLOT`.
        assert_eq!(slot_of(b"foo"), 12182);
        assert_eq!(slot_of(b"bar"), 5061);
        assert_eq!(slot_of(b"123456789"), 12739);
    }

    #[test]
    fn only_a_non_empty_first_hash_tag_is_hashed() {
        assert_eq!(hash_tag(b"{user1000}.following"), b"user1000");
        assert_eq!(hash_tag(b"foo{}{bar}"), b"foo{}{bar}");
        assert_eq!(hash_tag(b"foo{{bar}}zap"), b"{bar");
        assert_eq!(hash_tag(b"foo{bar}{zap}"), b"bar");
        assert_eq!(hash_tag(b"foo{bar"), b"foo{bar");
        assert_eq!(hash_tag(b"}foo{"), b"}foo{");
    }
}
