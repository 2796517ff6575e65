//! The private key boxd authenticates to a device with (`BOXD_ADB_KEY`), as adb's own `adbkey`: the
//! device sends a 20-byte token, boxd signs it (RSA PKCS#1 v1.5, the token standing as a SHA-1 digest,
//! as adb's `RSA_sign(NID_sha1, token)`), and a device that does not know the key is offered its public
//! half in Android's format (the `adbkey.pub` line, which is also what goes into the device's
//! `/data/misc/adb/adb_keys`). The key lives only in this process's memory; no message names its
//! private parts.

use base64::Engine as _;
use rsa::PrivateKey;
use rsa::pkcs1::DecodeRsaPrivateKey;
use rsa::pkcs8::DecodePrivateKey;
use rsa::traits::PublicKeyParts;
use sha1::Sha1;

/// The token adbd asks the host to sign is this long (a SHA-1 digest's size).
pub const TOKEN_SIZE: usize = 20;
/// adbd knows only 2048-bit keys: Android's public key blob has room for exactly this modulus.
const MODULUS_BYTES: usize = 256;
const MODULUS_WORDS: u32 = 64;
/// What follows the key in its `adbkey.pub` line (adb writes `user@host`): who holds the key, for
/// whoever reads the device's adb_keys.
const COMMENT: &str = "boxd";

#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    #[error(
        "is not a PEM private key (`-----BEGIN PRIVATE KEY-----` as `adb keygen` writes it, or `-----BEGIN RSA PRIVATE KEY-----`)"
    )]
    NotPem,
    #[error("is an encrypted private key: give it unencrypted (boxd has no passphrase to open it)")]
    Encrypted,
    // The parsers' reasons name a position or an ASN.1 kind, never the key's bytes.
    #[error("is not a readable {format} RSA private key: {reason}")]
    Malformed {
        format: &'static str,
        reason: String,
    },
    #[error("is a {0}-byte RSA key; adbd accepts only 2048-bit keys")]
    Size(usize),
    #[error("has a public exponent larger than Android's 32-bit field holds")]
    Exponent,
    #[error("the device's token is {0} bytes, not {TOKEN_SIZE}")]
    Token(usize),
    #[error("cannot sign the device's token: {0}")]
    Sign(String),
}

/// An RSA key pair in the form adb uses it.
pub struct AdbKey {
    private: PrivateKey,
    /// `BASE64 boxd`: Android's public key blob, as a line of adb_keys.
    public_line: String,
}

/// Only the public half: a key printed by mistake (a `{:?}` in a log) must not leak.
impl std::fmt::Debug for AdbKey {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("AdbKey")
            .field("public_line", &self.public_line)
            .finish_non_exhaustive()
    }
}

impl AdbKey {
    /// A PKCS#8 (`BEGIN PRIVATE KEY`, what `adb keygen` and `openssl genpkey` write) or PKCS#1
    /// (`BEGIN RSA PRIVATE KEY`) PEM key.
    pub fn from_pem(pem: &str) -> Result<AdbKey, KeyError> {
        let pem = pem.trim();
        let private = if pem.contains("-----BEGIN ENCRYPTED PRIVATE KEY-----") {
            return Err(KeyError::Encrypted);
        } else if pem.contains("-----BEGIN PRIVATE KEY-----") {
            PrivateKey::from_pkcs8_pem(pem).map_err(|err| KeyError::Malformed {
                format: "PKCS#8",
                reason: err.to_string(),
            })?
        } else if pem.contains("-----BEGIN RSA PRIVATE KEY-----") {
            PrivateKey::from_pkcs1_pem(pem).map_err(|err| KeyError::Malformed {
                format: "PKCS#1",
                reason: err.to_string(),
            })?
        } else {
            return Err(KeyError::NotPem);
        };
        let public_line = public_line(&private)?;
        Ok(AdbKey {
            private,
            public_line,
        })
    }

    /// The public key as one line of Android's adb_keys (`adbkey.pub`): not secret.
    pub fn public_line(&self) -> &str {
        &self.public_line
    }

    /// The answer to the device's `AUTH TOKEN`: the token signed as adb signs it (PKCS#1 v1.5 with
    /// SHA-1's DigestInfo, the token itself as the digest). rsa blinds the private operation with the
    /// system's randomness, so its timing does not follow the key.
    pub fn sign(&self, token: &[u8]) -> Result<Vec<u8>, KeyError> {
        if token.len() != TOKEN_SIZE {
            return Err(KeyError::Token(token.len()));
        }
        self.private
            .pkcs1v15_sign_prehash::<Sha1>(token)
            .map_err(|err| KeyError::Sign(err.to_string()))
    }
}

/// Android's `RSAPublicKey` (`android_pubkey.c`), base64, then a space and [`COMMENT`]: the modulus
/// size in 32-bit words, `n0inv = -1 / n mod 2^32`, the modulus and `rr = (2^2048)^2 mod n`, both
/// little-endian, and the public exponent. adbd reads the modulus and exponent; n0inv and rr are what
/// older devices verified with, so they are computed as adb computes them.
fn public_line(private: &PrivateKey) -> Result<String, KeyError> {
    let modulus = private.n_bytes();
    // Exactly 2048 bits: 256 bytes with the top bit set (trimmed, so no leading zero byte).
    if modulus.len() != MODULUS_BYTES || modulus.first().is_none_or(|top| top & 0x80 == 0) {
        return Err(KeyError::Size(modulus.len()));
    }
    let exponent_bytes = private.e_bytes();
    if exponent_bytes.len() > 4 {
        return Err(KeyError::Exponent);
    }
    let exponent = exponent_bytes
        .iter()
        .fold(0u32, |value, byte| (value << 8) | u32::from(*byte));
    // Little-endian 32-bit words of n, as Android stores it.
    let words: Vec<u32> = modulus
        .rchunks(4)
        .map(|chunk| {
            chunk
                .iter()
                .fold(0u32, |value, byte| (value << 8) | u32::from(*byte))
        })
        .collect();
    let n0 = words.first().copied().unwrap_or(1);
    let rr = power_of_two_mod(2 * 8 * MODULUS_BYTES, &words);
    let mut blob = Vec::with_capacity(4 + 4 + 2 * MODULUS_BYTES + 4);
    blob.extend_from_slice(&MODULUS_WORDS.to_le_bytes());
    blob.extend_from_slice(&negative_inverse(n0).to_le_bytes());
    blob.extend(modulus.iter().rev());
    for word in &rr {
        blob.extend_from_slice(&word.to_le_bytes());
    }
    blob.extend_from_slice(&exponent.to_le_bytes());
    Ok(format!(
        "{} {COMMENT}",
        base64::engine::general_purpose::STANDARD.encode(&blob)
    ))
}

/// `-1 / n0 mod 2^32` for an odd `n0`. Wrapping arithmetic is the point here: everything is modulo
/// 2^32. Newton's step `x * (2 - n0 * x)` doubles the correct low bits, and `x = n0` is right to 3 bits
/// (an odd square is 1 mod 8): 3, 6, 12, 24, 48 bits after four steps.
fn negative_inverse(n0: u32) -> u32 {
    let mut inverse = n0;
    for _ in 0..4 {
        inverse = inverse.wrapping_mul(2u32.wrapping_sub(n0.wrapping_mul(inverse)));
    }
    inverse.wrapping_neg()
}

/// `2^exponent mod n`, `n` as little-endian 32-bit words (n > 1), by doubling 1 `exponent` times and
/// subtracting n whenever the value reaches it. A few thousand word-wise passes: no big-number crate
/// needed for one value computed once at start.
fn power_of_two_mod(exponent: usize, modulus: &[u32]) -> Vec<u32> {
    let mut value = vec![0u32; modulus.len()];
    if let Some(low) = value.first_mut() {
        *low = 1;
    }
    for _ in 0..exponent {
        // value < n, so 2 * value < 2n: one subtraction at most brings it back below n.
        let mut carry = 0u32;
        for word in value.iter_mut() {
            let doubled = (u64::from(*word) << 1) | u64::from(carry);
            *word = doubled as u32; // the low 32 bits; the 33rd goes on as the carry
            carry = (doubled >> 32) as u32;
        }
        if carry != 0 || !less_than(&value, modulus) {
            // With a carry out, the true value is 2^(32 * words) + value; subtracting n wraps the
            // words to exactly the right result, the borrow cancelling the carry.
            let mut borrow = 0u32;
            for (word, subtrahend) in value.iter_mut().zip(modulus) {
                let (first, under_first) = word.overflowing_sub(*subtrahend);
                let (second, under_second) = first.overflowing_sub(borrow);
                *word = second;
                borrow = u32::from(under_first || under_second);
            }
        }
    }
    value
}

/// `a < b` for little-endian words of equal length.
fn less_than(a: &[u32], b: &[u32]) -> bool {
    for (x, y) in a.iter().rev().zip(b.iter().rev()) {
        if x != y {
            return x < y;
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn powers_of_two_match_plain_arithmetic() {
        // One and two words, against u128 arithmetic, for moduli with and without the top bit.
        for modulus in [
            3u64,
            0xffff_fffb,
            0x8000_0000_0000_001d,
            0xffff_ffff_ffff_ffc5,
            0x1_0000_0001,
        ] {
            let words: Vec<u32> = if modulus >> 32 == 0 {
                vec![modulus as u32]
            } else {
                vec![modulus as u32, (modulus >> 32) as u32]
            };
            for exponent in [0usize, 1, 31, 32, 33, 63, 64, 127, 128, 200] {
                let mut expected: u128 = 1;
                for _ in 0..exponent {
                    expected = (expected * 2) % u128::from(modulus);
                }
                let got = power_of_two_mod(exponent, &words)
                    .iter()
                    .rev()
                    .fold(0u128, |value, word| (value << 32) | u128::from(*word));
                assert_eq!(got, expected, "2^{exponent} mod {modulus:#x}");
            }
        }
    }

    #[test]
    fn the_negative_inverse_times_n0_is_minus_one() {
        for n0 in [1u32, 3, 0xffff_ffff, 0x8000_0001, 0x1234_5677, 65537] {
            assert_eq!(n0.wrapping_mul(negative_inverse(n0)), u32::MAX, "{n0:#x}");
        }
    }

    #[test]
    fn a_key_signs_as_adb_does_and_its_public_line_is_androids_blob() {
        use rsa::pkcs1::EncodeRsaPrivateKey;
        use rsa::pkcs8::{EncodePrivateKey, LineEnding};
        let private = PrivateKey::new(&mut getrandom::SysRng, 2048).unwrap();
        let pkcs8 = AdbKey::from_pem(&private.to_pkcs8_pem(LineEnding::LF).unwrap()).unwrap();
        let pkcs1 = AdbKey::from_pem(&private.to_pkcs1_pem(LineEnding::CRLF).unwrap()).unwrap();
        assert_eq!(pkcs8.public_line(), pkcs1.public_line());
        assert!(!format!("{pkcs8:?}").contains("private"), "{pkcs8:?}");

        let (encoded, comment) = pkcs8.public_line().split_once(' ').unwrap();
        assert_eq!(comment, "boxd");
        let blob = base64::engine::general_purpose::STANDARD
            .decode(encoded)
            .unwrap();
        assert_eq!(blob.len(), 4 + 4 + 2 * MODULUS_BYTES + 4);
        let word = |at: usize| u32::from_le_bytes(blob[at..at + 4].try_into().unwrap());
        assert_eq!(word(0), MODULUS_WORDS);
        assert_eq!(word(8).wrapping_mul(word(4)), u32::MAX, "n0inv * n0 = -1");
        let mut modulus = blob[8..8 + MODULUS_BYTES].to_vec();
        modulus.reverse();
        assert_eq!(modulus, private.n_bytes().to_vec());
        assert_eq!(word(blob.len() - 4), 65537);

        let token = [0x5au8; TOKEN_SIZE];
        let signature = pkcs8.sign(&token).unwrap();
        assert_eq!(
            signature,
            pkcs1.sign(&token).unwrap(),
            "PKCS#1 v1.5 is deterministic"
        );
        private
            .to_public_key()
            .pkcs1v15_verify_prehash::<Sha1>(&token, &signature)
            .unwrap();
        assert!(matches!(pkcs8.sign(&token[1..]), Err(KeyError::Token(19))));

        let small = PrivateKey::new(&mut getrandom::SysRng, 1024).unwrap();
        let refused = AdbKey::from_pem(&small.to_pkcs8_pem(LineEnding::LF).unwrap()).unwrap_err();
        assert!(matches!(refused, KeyError::Size(128)), "{refused:?}");
    }

    #[test]
    fn what_is_not_a_usable_key_is_refused_without_echoing_it() {
        let not_pem = AdbKey::from_pem("secret-looking-text").unwrap_err();
        assert!(matches!(not_pem, KeyError::NotPem));
        assert!(!not_pem.to_string().contains("secret-looking-text"));
        let broken = AdbKey::from_pem(
            "-----BEGIN PRIVATE KEY-----\nc2VjcmV0LWJ5dGVz\n-----END PRIVATE KEY-----\n",
        )
        .unwrap_err();
        assert!(
            matches!(
                broken,
                KeyError::Malformed {
                    format: "PKCS#8",
                    ..
                }
            ),
            "{broken:?}"
        );
        assert!(!broken.to_string().contains("c2VjcmV0LWJ5dGVz"));
        assert!(matches!(
            AdbKey::from_pem(
                "-----BEGIN ENCRYPTED PRIVATE KEY-----\nAA==\n-----END ENCRYPTED PRIVATE KEY-----"
            ),
            Err(KeyError::Encrypted)
        ));
    }
}
