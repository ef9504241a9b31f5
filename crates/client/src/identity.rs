//! Who a gallery is, and a refusal that renaming does not shed. Both clients drive this module:
//! the CLI (with the addresses it resolved) and the page (through `client-wasm`, with none:
//! a browser does not say which address it reached).
//!
//! A gallery has an Ed25519 key ([`shared::identity::IdentityDoc`]): it signs the SHA-256 of its
//! configuration, which names its anchors by SHA-256, so [`verify`] ties the configuration a
//! client uses to the key. The client pins the key on first use per origin ([`Book::meet`]) and,
//! after an answer failed a check that involved the photo's secret
//! (`crate::pir_search::driver::Refusal`), keys the refusal by **the key, the normalised origin
//! ([`origin`]) and every resolved address** ([`Book::record`]). Any one of them matching
//! refuses, and a match adds the others it came with to the refusal.
//!
//! Guarantee (what a server that received a refusal can do to get another search): it must
//! present, at once, an origin that no spelling of a refused one normalises to, addresses none
//! of which is refused (CLI), and a key other than every refused key — and a key other than the
//! one pinned for that origin, which is itself refused until the person accepts it
//! ([`Stop::NewKey`]). Proof sketch: [`Book::before_contact`] runs before any request and
//! refuses on the origin or an address; [`Book::meet`] runs after the identity document (public,
//! the same for every photo) and before any search request, and refuses on the key, or on a key
//! other than the pinned one. Every identifier met under a refusal joins it, so a server that is
//! caught under one name and then changes its key there is still refused by that name. What
//! this cannot catch: a new name, on new addresses, with a new key — a server indistinguishable
//! from a new gallery (docs/threat-model.md).

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, SocketAddr};

use ed25519_dalek::{Signature, VerifyingKey};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use shared::identity::{signed_message, IdentityDoc};

use crate::pir_search::driver::Refusal;

/// Why a gallery's identity or address was not accepted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IdentityError {
    #[error("not an http:// or https:// URL with a host: {0}")]
    BadUrl(String),
    #[error("the gallery's identity document is malformed: {0}")]
    Malformed(&'static str),
    #[error("the configuration is not the one the gallery's identity signs (its SHA-256 differs)")]
    NotSigned,
    #[error("the gallery's signature does not verify under the key it presents")]
    BadSignature,
}

/// The normalised origin of a gallery URL: the host and, unless it is 80 or 443, the port. Two
/// URLs that reach one server by the usual spellings normalise alike: case, IDNA, a trailing
/// dot, leading `www.` labels, the scheme (`http` or `https`), a default port written out,
/// userinfo, path (`/./`, `/gallery/`), query and fragment are dropped; IPv4 written as a
/// decimal number or an IPv4-mapped IPv6 address is the dotted IPv4 address. Keying by it
/// refuses more than one gallery where several share a host; a refusal errs on that side.
pub fn origin(url: &str) -> Result<String, IdentityError> {
    let bad =
        |why: &str| IdentityError::BadUrl(format!("{why} ({})", shared::text::excerpt(url, 80)));
    let u = url::Url::parse(url.trim()).map_err(|e| bad(&e.to_string()))?;
    if !matches!(u.scheme(), "http" | "https") {
        return Err(bad("not http or https"));
    }
    let host = match u.host() {
        Some(url::Host::Domain(d)) => {
            let mut d = d.trim_end_matches('.');
            while let Some(rest) = d.strip_prefix("www.") {
                if rest.is_empty() {
                    break;
                }
                d = rest;
            }
            if d.is_empty() {
                return Err(bad("an empty host"));
            }
            d.to_string()
        }
        Some(url::Host::Ipv4(a)) => a.to_string(),
        Some(url::Host::Ipv6(a)) => match a.to_ipv4_mapped() {
            Some(v4) => v4.to_string(),
            None => format!("[{a}]"),
        },
        None => return Err(bad("no host")),
    };
    Ok(match u.port_or_known_default() {
        Some(80) | Some(443) | None => host,
        Some(p) => format!("{host}:{p}"),
    })
}

/// The canonical text of a resolved address (an IPv4-mapped IPv6 address as IPv4).
pub fn address(addr: SocketAddr) -> String {
    let ip = match addr.ip() {
        IpAddr::V6(a) => a.to_ipv4_mapped().map_or(IpAddr::V6(a), IpAddr::V4),
        v4 => v4,
    };
    SocketAddr::new(ip, addr.port()).to_string()
}

fn hex_array<const N: usize>(s: &str, what: &'static str) -> Result<[u8; N], IdentityError> {
    if s.len() != 2 * N {
        return Err(IdentityError::Malformed(what));
    }
    let bytes = hex::decode(s).map_err(|_| IdentityError::Malformed(what))?;
    bytes.try_into().map_err(|_| IdentityError::Malformed(what))
}

/// Checks `doc` against `config_body`, the bytes of the configuration this client read, and
/// returns the gallery's key (64 lower-case hex digits). Refuses a key that is not a valid,
/// non-weak curve point, a configuration whose SHA-256 is not the one signed, and a signature
/// that does not verify under Ed25519's strict rules (`verify_strict`: no malleable or
/// small-order forms). The configuration names the anchors by SHA-256, so a client that also
/// checks them by name uses only documents the key signed, directly or through that name.
pub fn verify(doc: &IdentityDoc, config_body: &[u8]) -> Result<String, IdentityError> {
    let key: [u8; 32] = hex_array(&doc.key, "the key is not 64 hex digits")?;
    let signed: [u8; 32] = hex_array(
        &doc.config_sha256,
        "the configuration's SHA-256 is not 64 hex digits",
    )?;
    let sig: [u8; 64] = hex_array(&doc.signature, "the signature is not 128 hex digits")?;
    let vk = VerifyingKey::from_bytes(&key)
        .map_err(|_| IdentityError::Malformed("the key is not a point of the curve"))?;
    if vk.is_weak() {
        return Err(IdentityError::Malformed("the key is of small order"));
    }
    let actual: [u8; 32] = Sha256::digest(config_body).into();
    if actual != signed {
        return Err(IdentityError::NotSigned);
    }
    vk.verify_strict(&signed_message(&signed), &Signature::from_bytes(&sig))
        .map_err(|_| IdentityError::BadSignature)?;
    Ok(hex::encode(key))
}

/// Why nothing may be sent to a gallery.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stop {
    /// A refusal stands against one of the gallery's identifiers.
    Refused(Refusal),
    /// The origin presents a key other than the one pinned for it.
    NewKey {
        origin: String,
        pinned: String,
        presented: String,
    },
}

impl Stop {
    /// One text for the page and the CLI (each adds how to act on it).
    pub fn message(&self) -> String {
        match self {
            Stop::Refused(r) => r.failure().message,
            Stop::NewKey {
                origin,
                pinned,
                presented,
            } => format!(
                "{} presents the gallery key {presented}, not the key {pinned} this client \
                 pinned when it first searched there. A new key can be another server under the \
                 same name, or the same server trying to shed a refusal, so nothing is sent \
                 until you accept the new key.",
                shared::text::excerpt(origin, 100)
            ),
        }
    }
}

/// How a gallery was met.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Meeting {
    /// The key pinned for this origin.
    Known,
    /// No key was pinned for this origin: this one is now.
    FirstUse,
}

/// A refusal and every identifier it is known by.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Refused {
    pub refusal: Refusal,
    #[serde(default)]
    pub keys: BTreeSet<String>,
    #[serde(default)]
    pub origins: BTreeSet<String>,
    #[serde(default)]
    pub addresses: BTreeSet<String>,
}

/// The client's record of galleries: the key pinned for each origin, and the refusals. The
/// CLI keeps it in one file, the page in `localStorage`; either passes it through these rules
/// and stores it back after every call that takes `&mut self`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Book {
    /// Normalised origin → the key (hex) pinned on first use or accepted by the person.
    #[serde(default)]
    pub pins: BTreeMap<String, String>,
    #[serde(default)]
    pub refusals: Vec<Refused>,
}

impl Book {
    fn matching(&self, origin: &str, addresses: &[String], key: Option<&str>) -> Option<usize> {
        self.refusals.iter().position(|r| {
            r.origins.contains(origin)
                || addresses.iter().any(|a| r.addresses.contains(a))
                || key.is_some_and(|k| r.keys.contains(k))
        })
    }

    /// Adds what a refused gallery was met with to its refusal; returns the refusal.
    fn spread(&mut self, i: usize, origin: &str, addresses: &[String], key: Option<&str>) -> Stop {
        let pinned = self.pins.get(origin).cloned();
        let r = &mut self.refusals[i];
        r.origins.insert(origin.to_string());
        r.addresses.extend(addresses.iter().cloned());
        r.keys
            .extend(key.map(str::to_string).into_iter().chain(pinned));
        Stop::Refused(r.refusal.clone())
    }

    /// Before any request: refused if a refusal stands against `origin` or any of `addresses`
    /// (the name's resolved addresses, as [`address`] writes them; none in the browser).
    pub fn before_contact(&mut self, origin: &str, addresses: &[String]) -> Result<(), Stop> {
        match self.matching(origin, addresses, None) {
            Some(i) => Err(self.spread(i, origin, addresses, None)),
            None => Ok(()),
        }
    }

    /// After the identity was verified ([`verify`]) and before any search request: refused if a
    /// refusal stands against the key, the origin or an address, or if the origin has another
    /// key pinned. On first use the key is pinned for `origin`.
    pub fn meet(&mut self, origin: &str, addresses: &[String], key: &str) -> Result<Meeting, Stop> {
        if let Some(i) = self.matching(origin, addresses, Some(key)) {
            return Err(self.spread(i, origin, addresses, Some(key)));
        }
        match self.pins.get(origin) {
            Some(pinned) if pinned == key => Ok(Meeting::Known),
            Some(pinned) => Err(Stop::NewKey {
                origin: origin.to_string(),
                pinned: pinned.clone(),
                presented: key.to_string(),
            }),
            None => {
                self.pins.insert(origin.to_string(), key.to_string());
                Ok(Meeting::FirstUse)
            }
        }
    }

    /// The refusal to pass to a search driver for this gallery (none after `meet` passed).
    pub fn refusal(
        &self,
        origin: &str,
        addresses: &[String],
        key: Option<&str>,
    ) -> Option<Refusal> {
        self.matching(origin, addresses, key)
            .map(|i| self.refusals[i].refusal.clone())
    }

    /// Refuse every later search against this gallery, by each of its identifiers (recorded
    /// before the failure is shown). The key pinned for `origin` is refused with it.
    pub fn record(
        &mut self,
        origin: &str,
        addresses: &[String],
        key: Option<&str>,
        refusal: &Refusal,
    ) {
        let i = match self.matching(origin, addresses, key) {
            Some(i) => i,
            None => {
                self.refusals.push(Refused {
                    refusal: refusal.clone(),
                    keys: BTreeSet::new(),
                    origins: BTreeSet::new(),
                    addresses: BTreeSet::new(),
                });
                self.refusals.len() - 1
            }
        };
        self.spread(i, origin, addresses, key);
    }

    /// The person accepts `key` for `origin` (after [`Stop::NewKey`]); returns the key it
    /// replaces. A refusal is not lifted by this: a refused key or origin stays refused.
    pub fn accept(&mut self, origin: &str, key: &str) -> Option<String> {
        self.pins.insert(origin.to_string(), key.to_string())
    }

    /// The person lifts every refusal that names `origin` or the key pinned for it (with every
    /// other identifier it was known by); returns whether there was one.
    pub fn clear(&mut self, origin: &str) -> bool {
        let pinned = self.pins.get(origin).cloned();
        let before = self.refusals.len();
        self.refusals.retain(|r| {
            !(r.origins.contains(origin) || pinned.as_ref().is_some_and(|k| r.keys.contains(k)))
        });
        self.refusals.len() != before
    }
}

/// A well-formed key as clients store it: 64 hex digits, lower case.
pub fn parse_key(s: &str) -> Result<String, IdentityError> {
    let key: [u8; 32] = hex_array(s.trim(), "the key is not 64 hex digits")?;
    VerifyingKey::from_bytes(&key)
        .map_err(|_| IdentityError::Malformed("the key is not a point of the curve"))?;
    Ok(hex::encode(key))
}

#[cfg(test)]
mod tests {
    use super::*;
    use ed25519_dalek::{Signer, SigningKey};

    fn refusal() -> Refusal {
        Refusal {
            version: "v1".into(),
            what: "a thumbnail's digest".into(),
        }
    }

    fn signed(seed: u8, config: &[u8]) -> IdentityDoc {
        let sk = SigningKey::from_bytes(&[seed; 32]);
        let digest: [u8; 32] = Sha256::digest(config).into();
        IdentityDoc {
            key: hex::encode(sk.verifying_key().as_bytes()),
            config_sha256: hex::encode(digest),
            signature: hex::encode(sk.sign(&signed_message(&digest)).to_bytes()),
        }
    }

    #[test]
    fn every_spelling_of_one_server_normalises_alike() {
        let base = origin("https://gallery.example").unwrap();
        assert_eq!(base, "gallery.example");
        for spelling in [
            "https://gallery.example/",
            "https://gallery.example:443",
            "https://gallery.example.",
            "https://gallery.example.:443/",
            "https://www.gallery.example",
            "https://WWW.Gallery.Example./",
            "http://gallery.example",
            "http://gallery.example:80/",
            "https://gallery.example/./",
            "https://gallery.example/gallery/../",
            "https://user:pw@gallery.example/?q=1#f",
            "  https://gallery.example  ",
        ] {
            assert_eq!(origin(spelling).unwrap(), base, "{spelling}");
        }
        // Ports other than the defaults stay; http and https on one port are one server.
        assert_eq!(origin("http://127.0.0.1:8080/").unwrap(), "127.0.0.1:8080");
        assert_eq!(origin("https://127.0.0.1:8080").unwrap(), "127.0.0.1:8080");
        assert_eq!(
            origin("http://127.0.0.1.:8080/./").unwrap(),
            "127.0.0.1:8080"
        );
        assert_eq!(origin("http://2130706433:8080").unwrap(), "127.0.0.1:8080");
        assert_eq!(
            origin("http://[::ffff:127.0.0.1]:8080").unwrap(),
            "127.0.0.1:8080"
        );
        assert_eq!(
            origin("http://www.localhost:8080").unwrap(),
            "localhost:8080"
        );
        assert_eq!(origin("http://[::1]:8080").unwrap(), "[::1]:8080");
        // IDNA: the Unicode and punycode spellings are one host.
        assert_eq!(
            origin("https://bücher.example").unwrap(),
            origin("https://xn--bcher-kva.example").unwrap()
        );
        // Distinct servers stay distinct.
        assert_ne!(origin("https://other.example").unwrap(), base);
        assert_ne!(origin("http://127.0.0.1:8081").unwrap(), "127.0.0.1:8080");
        for bad in [
            "ftp://gallery.example",
            "gallery.example",
            "file:///etc",
            "https://",
        ] {
            assert!(origin(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn addresses_are_written_one_way() {
        let v4: SocketAddr = "127.0.0.1:9".parse().unwrap();
        let mapped: SocketAddr = "[::ffff:127.0.0.1]:9".parse().unwrap();
        assert_eq!(address(v4), "127.0.0.1:9");
        assert_eq!(address(mapped), "127.0.0.1:9");
        assert_eq!(address("[::1]:9".parse().unwrap()), "[::1]:9");
    }

    #[test]
    fn a_signed_configuration_verifies_and_anything_else_is_refused() {
        let config = br#"{"anchors_sha256":"ab"}"#;
        let doc = signed(7, config);
        assert_eq!(verify(&doc, config).unwrap(), doc.key);
        // Another configuration than the one signed.
        assert_eq!(verify(&doc, b"{}"), Err(IdentityError::NotSigned));
        // Another key's signature (a forged identity), and a signature with one bit flipped.
        let other = signed(8, config);
        let forged = IdentityDoc {
            signature: other.signature.clone(),
            ..doc.clone()
        };
        assert_eq!(verify(&forged, config), Err(IdentityError::BadSignature));
        let mut sig = hex::decode(&doc.signature).unwrap();
        sig[5] ^= 1;
        let flipped = IdentityDoc {
            signature: hex::encode(sig),
            ..doc.clone()
        };
        assert_eq!(verify(&flipped, config), Err(IdentityError::BadSignature));
        // A claimed digest that matches the body, signed by no one.
        let unsigned = IdentityDoc {
            signature: "00".repeat(64),
            ..doc.clone()
        };
        assert!(verify(&unsigned, config).is_err());
        // Malformed fields.
        for bad in [
            IdentityDoc {
                key: "zz".repeat(32),
                ..doc.clone()
            },
            IdentityDoc {
                key: doc.key[..62].to_string(),
                ..doc.clone()
            },
            IdentityDoc {
                signature: doc.signature[..126].to_string(),
                ..doc.clone()
            },
            // The identity point: a small-order key signs anything.
            IdentityDoc {
                key: format!("01{}", "00".repeat(31)),
                ..doc.clone()
            },
        ] {
            assert!(
                matches!(verify(&bad, config), Err(IdentityError::Malformed(_))),
                "{bad:?}"
            );
        }
    }

    fn addrs(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn a_refusal_holds_by_key_origin_or_address_and_spreads_to_what_it_meets() {
        let (k1, k2, k3) = ("aa".repeat(32), "bb".repeat(32), "cc".repeat(32));
        let mut book = Book::default();
        let a = addrs(&["10.0.0.1:443"]);
        assert_eq!(book.before_contact("gallery.example", &a), Ok(()));
        assert_eq!(book.meet("gallery.example", &a, &k1), Ok(Meeting::FirstUse));
        assert_eq!(book.meet("gallery.example", &a, &k1), Ok(Meeting::Known));
        book.record("gallery.example", &a, Some(&k1), &refusal());
        let refused = Err(Stop::Refused(refusal()));
        // The origin, before any request.
        assert_eq!(book.before_contact("gallery.example", &[]), refused);
        // The address, under a new name.
        assert_eq!(book.before_contact("new.example", &a), refused);
        // The key, under a new name at a new address (the browser knows no address).
        let b = addrs(&["10.0.0.2:443"]);
        assert_eq!(book.before_contact("renamed.example", &b), Ok(()));
        assert_eq!(
            book.meet("renamed.example", &b, &k1),
            refused.clone().map(|_| Meeting::Known)
        );
        // What it was met with joined the refusal: a new key there is still refused, by the
        // name and by the address.
        assert_eq!(book.before_contact("renamed.example", &[]), refused);
        assert_eq!(book.before_contact("third.example", &b), refused);
        assert_eq!(
            book.meet("renamed.example", &[], &k2),
            refused.clone().map(|_| Meeting::Known)
        );
        // Another gallery is untouched.
        assert_eq!(
            book.meet("other.example", &addrs(&["10.9.9.9:443"]), &k3),
            Ok(Meeting::FirstUse)
        );
        assert_eq!(book.refusal("other.example", &[], Some(&k3)), None);
        // Cleared by the person, by any name it is known by: every identifier goes with it.
        assert!(book.clear("renamed.example"));
        assert_eq!(book.before_contact("gallery.example", &a), Ok(()));
        assert_eq!(book.meet("gallery.example", &a, &k1), Ok(Meeting::Known));
        assert!(!book.clear("gallery.example"));
    }

    #[test]
    fn a_new_key_at_a_known_origin_waits_for_the_person() {
        let (k1, k2) = ("aa".repeat(32), "bb".repeat(32));
        let mut book = Book::default();
        assert_eq!(
            book.meet("gallery.example", &[], &k1),
            Ok(Meeting::FirstUse)
        );
        let stop = book.meet("gallery.example", &[], &k2).unwrap_err();
        assert_eq!(
            stop,
            Stop::NewKey {
                origin: "gallery.example".into(),
                pinned: k1.clone(),
                presented: k2.clone()
            }
        );
        assert!(stop.message().contains(&k2), "{}", stop.message());
        // Refused again until accepted; then the new key is the known one.
        assert!(book.meet("gallery.example", &[], &k2).is_err());
        assert_eq!(book.accept("gallery.example", &k2), Some(k1.clone()));
        assert_eq!(book.meet("gallery.example", &[], &k2), Ok(Meeting::Known));
        assert!(book.meet("gallery.example", &[], &k1).is_err());
        // Accepting a key does not lift a refusal.
        book.record("gallery.example", &[], Some(&k2), &refusal());
        book.accept("gallery.example", &k1);
        assert!(matches!(
            book.meet("gallery.example", &[], &k1),
            Err(Stop::Refused(_))
        ));
    }

    #[test]
    fn the_book_round_trips_and_keys_parse_strictly() {
        let mut book = Book::default();
        book.meet("gallery.example", &[], &"aa".repeat(32)).ok();
        book.record(
            "gallery.example",
            &addrs(&["10.0.0.1:443"]),
            None,
            &refusal(),
        );
        let text = serde_json::to_string(&book).unwrap();
        assert_eq!(serde_json::from_str::<Book>(&text).unwrap(), book);
        assert_eq!(serde_json::from_str::<Book>("{}").unwrap(), Book::default());
        let key = hex::encode(SigningKey::from_bytes(&[3; 32]).verifying_key().as_bytes());
        assert_eq!(parse_key(&key.to_uppercase()).unwrap(), key);
        assert!(parse_key("abc").is_err());
    }
}
