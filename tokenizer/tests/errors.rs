//! Tokenizer construction from small hand-made GGUF files: every bad key is refused with a
//! `TokenizerError::Invalid` naming it, and the llama.cpp behaviours that the test vectors do not reach
//! (SentencePiece merge order, byte fallback, special-token partition with rstrip, BOS/EOS) hold.

use cinder_gguf::GgufFile;
use cinder_tokenizer::TokenizerError;
use cinder_tokenizer::{Tokenizer, TokenizerKind};

/// A metadata value for the tiny writer below.
#[derive(Clone, Debug)]
enum V {
    U32(u32),
    I32(i32),
    Bool(bool),
    Str(String),
    Strs(Vec<String>),
    F32s(Vec<f32>),
    I32s(Vec<i32>),
}

fn s(x: &str) -> V {
    V::Str(x.to_string())
}

fn strs(xs: &[&str]) -> V {
    V::Strs(xs.iter().map(|x| x.to_string()).collect())
}

/// Serializes a GGUF v3 file with metadata only.
fn gguf(kvs: &[(&str, V)]) -> GgufFile {
    fn put_str(out: &mut Vec<u8>, s: &str) {
        out.extend_from_slice(&(s.len() as u64).to_le_bytes());
        out.extend_from_slice(s.as_bytes());
    }
    let mut out = b"GGUF".to_vec();
    out.extend_from_slice(&3u32.to_le_bytes());
    out.extend_from_slice(&0u64.to_le_bytes());
    out.extend_from_slice(&(kvs.len() as u64).to_le_bytes());
    for (k, v) in kvs {
        put_str(&mut out, k);
        match v {
            V::U32(x) => {
                out.extend_from_slice(&4u32.to_le_bytes());
                out.extend_from_slice(&x.to_le_bytes());
            }
            V::I32(x) => {
                out.extend_from_slice(&5u32.to_le_bytes());
                out.extend_from_slice(&x.to_le_bytes());
            }
            V::Bool(x) => {
                out.extend_from_slice(&7u32.to_le_bytes());
                out.push(*x as u8);
            }
            V::Str(x) => {
                out.extend_from_slice(&8u32.to_le_bytes());
                put_str(&mut out, x);
            }
            V::Strs(xs) => {
                out.extend_from_slice(&9u32.to_le_bytes());
                out.extend_from_slice(&8u32.to_le_bytes());
                out.extend_from_slice(&(xs.len() as u64).to_le_bytes());
                for x in xs {
                    put_str(&mut out, x);
                }
            }
            V::F32s(xs) => {
                out.extend_from_slice(&9u32.to_le_bytes());
                out.extend_from_slice(&6u32.to_le_bytes());
                out.extend_from_slice(&(xs.len() as u64).to_le_bytes());
                for x in xs {
                    out.extend_from_slice(&x.to_le_bytes());
                }
            }
            V::I32s(xs) => {
                out.extend_from_slice(&9u32.to_le_bytes());
                out.extend_from_slice(&5u32.to_le_bytes());
                out.extend_from_slice(&(xs.len() as u64).to_le_bytes());
                for x in xs {
                    out.extend_from_slice(&x.to_le_bytes());
                }
            }
        }
    }
    GgufFile::from_bytes(out).expect("valid GGUF")
}

/// A tiny SentencePiece vocabulary: <unk> <s> </s>, 256 byte tokens, then pieces with chosen scores.
fn spm_kvs() -> Vec<(&'static str, V)> {
    let mut tokens = vec!["<unk>".to_string(), "<s>".into(), "</s>".into()];
    let mut types = vec![2, 3, 3];
    let mut scores = vec![0.0, 0.0, 0.0];
    for b in 0..=255u8 {
        tokens.push(format!("<0x{b:02X}>"));
        types.push(6);
        scores.push(0.0);
    }
    // "▁ab" can be made as (▁a)(b) or (▁)(ab): the higher-scoring merge wins first.
    for (t, sc, ty) in [
        ("▁", -1.0, 1),
        ("a", -2.0, 1),
        ("b", -2.0, 1),
        ("c", -2.0, 1),
        ("ab", -3.0, 1),
        ("▁a", -4.0, 1),
        ("▁ab", -5.0, 1),
        ("bc", -3.0, 1),
        ("▁▁", -6.0, 1),
        ("<sep>", 0.0, 4),
        ("<|ctl|>", 0.0, 3),
    ] {
        tokens.push(t.to_string());
        scores.push(sc);
        types.push(ty);
    }
    vec![
        ("general.architecture", s("llama")),
        ("tokenizer.ggml.model", s("llama")),
        ("tokenizer.ggml.tokens", V::Strs(tokens)),
        ("tokenizer.ggml.scores", V::F32s(scores)),
        ("tokenizer.ggml.token_type", V::I32s(types)),
        ("tokenizer.ggml.bos_token_id", V::U32(1)),
        ("tokenizer.ggml.eos_token_id", V::U32(2)),
    ]
}

fn with(
    mut kvs: Vec<(&'static str, V)>,
    key: &'static str,
    v: Option<V>,
) -> Vec<(&'static str, V)> {
    kvs.retain(|(k, _)| *k != key);
    if let Some(v) = v {
        kvs.push((key, v));
    }
    kvs
}

fn build(kvs: &[(&str, V)]) -> Result<Tokenizer, TokenizerError> {
    Tokenizer::from_gguf(&gguf(kvs))
}

/// Asserts a `Tokenizer` error whose message contains `needle`.
fn refused(kvs: &[(&str, V)], needle: &str) {
    match build(kvs) {
        Err(TokenizerError::Invalid(msg)) => {
            assert!(msg.contains(needle), "message {msg:?} lacks {needle:?}")
        }
        Err(e) => panic!("expected a tokenizer error about {needle:?}, got {e}"),
        Ok(_) => panic!("expected a tokenizer error about {needle:?}, got a tokenizer"),
    }
}

#[test]
fn spm_merges_by_score_with_byte_fallback() {
    let tok = build(&spm_kvs()).unwrap();
    assert_eq!(tok.kind, TokenizerKind::SentencePiece);
    assert!(tok.add_bos && tok.add_space_prefix);
    let id = |t: &str| tok.token_id(t).unwrap();
    // ▁ab: "ab" (-3) merges before "▁a" (-4), then "▁ab" (-5)
    assert_eq!(tok.encode("ab", false).unwrap(), [id("▁ab")]);
    // abc: a|b|c -> "ab" and "bc" tie at -3: the leftmost pair merges first
    assert_eq!(tok.encode("abc", false).unwrap(), [id("▁ab"), id("c")]);
    // "x" is not a piece: its UTF-8 bytes fall back to <0xNN>; "é" is two bytes
    assert_eq!(tok.encode("x", false).unwrap(), [id("▁"), id("<0x78>")]);
    assert_eq!(
        tok.encode("é", false).unwrap(),
        [id("▁"), id("<0xC3>"), id("<0xA9>")]
    );
    assert_eq!(tok.encode("ab", true).unwrap(), [1, id("▁ab")]);
    assert_eq!(
        tok.decode(&[1, id("▁ab"), id("<0xC3>"), id("<0xA9>")], true)
            .unwrap(),
        "abé"
    );
    assert_eq!(tok.decode(&[1, id("▁ab")], false).unwrap(), "<s> ab");
    assert_eq!(tok.token_bytes(id("<0xC3>")).unwrap(), [0xC3]);
    assert_eq!(tok.token_bytes(id("▁ab")).unwrap(), b" ab");
    assert!(tok.token_bytes(100_000).is_err());
    assert!(tok.decode(&[100_000], false).is_err());
    assert_eq!(tok.encode("", true).unwrap(), [1]);
    assert!(tok.encode("", false).unwrap().is_empty());
}

#[test]
fn partition_of_special_tokens() {
    let tok = build(&spm_kvs()).unwrap();
    let id = |t: &str| tok.token_id(t).unwrap();
    // user-defined tokens are always cut out; the text after one gets the space prefix again
    assert_eq!(
        tok.encode("ab<sep>ab", false).unwrap(),
        [id("▁ab"), id("<sep>"), id("▁ab")]
    );
    assert_eq!(
        tok.encode("ab<sep> ab", false).unwrap(),
        [id("▁ab"), id("<sep>"), id("▁"), id("▁ab")]
    );
    // control tokens only with parse_special
    let ctl = id("<|ctl|>");
    assert!(!tok.encode("a<|ctl|>b", false).unwrap().contains(&ctl));
    assert_eq!(
        tok.tokenize("<|ctl|>ab", false, true).unwrap(),
        [ctl, id("▁ab")]
    );
    assert_eq!(tok.tokenize("<s>", false, true).unwrap(), [1]);
    // Phi-3 (by general.name) rstrips special tokens: the space after <sep> is eaten
    let phi = with(spm_kvs(), "general.name", Some(s("Phi3")));
    let tok = build(&phi).unwrap();
    assert_eq!(
        tok.encode("ab<sep> ab", false).unwrap(),
        [id("▁ab"), id("<sep>"), id("▁ab")]
    );
    // without add_space_prefix there is no leading ▁
    let nospace = with(
        spm_kvs(),
        "tokenizer.ggml.add_space_prefix",
        Some(V::Bool(false)),
    );
    let tok = build(&nospace).unwrap();
    assert_eq!(tok.encode("ab", false).unwrap(), [id("ab")]);
    assert_eq!(tok.decode(&[id("▁ab")], false).unwrap(), " ab");
}

#[test]
fn special_ids_and_end_of_generation() {
    let tok = build(&spm_kvs()).unwrap();
    assert_eq!(
        (tok.bos_id, tok.eos_id, tok.unk_id),
        (Some(1), Some(2), Some(0))
    );
    assert_eq!(tok.eot_ids, [2]);
    assert!(tok.special_ids.contains(&1) && tok.special_ids.contains(&2));
    let ctl = tok.token_id("<|ctl|>").unwrap();
    assert!(tok.special_ids.contains(&ctl) && !tok.is_eog(ctl));
    let n = tok.vocab_size;
    tok.validate_against_model(n).unwrap();
    let err = tok.validate_against_model(n - 1).unwrap_err().to_string();
    assert!(err.contains("embedding"), "{err}");
    // EOS added on request
    let eos = with(
        spm_kvs(),
        "tokenizer.ggml.add_eos_token",
        Some(V::Bool(true)),
    );
    assert_eq!(
        build(&eos).unwrap().encode("ab", true).unwrap().last(),
        Some(&2)
    );
}

#[test]
fn bad_metadata_is_refused_naming_the_key() {
    let base = spm_kvs();
    refused(
        &with(base.clone(), "tokenizer.ggml.model", None),
        "tokenizer.ggml.model",
    );
    refused(
        &with(base.clone(), "tokenizer.ggml.model", Some(s("rwkv"))),
        "not supported",
    );
    refused(
        &with(base.clone(), "tokenizer.ggml.model", Some(V::U32(1))),
        "tokenizer.ggml.model",
    );
    refused(
        &with(base.clone(), "tokenizer.ggml.tokens", None),
        "tokenizer.ggml.tokens",
    );
    refused(
        &with(base.clone(), "tokenizer.ggml.tokens", Some(s("x"))),
        "tokenizer.ggml.tokens",
    );
    refused(
        &with(
            base.clone(),
            "tokenizer.ggml.scores",
            Some(V::F32s(vec![0.0; 3])),
        ),
        "tokenizer.ggml.scores",
    );
    refused(
        &with(base.clone(), "tokenizer.ggml.scores", None),
        "tokenizer.ggml.scores",
    );
    refused(
        &with(
            base.clone(),
            "tokenizer.ggml.token_type",
            Some(V::I32s(vec![1; 5])),
        ),
        "tokenizer.ggml.token_type",
    );
    let n = 3 + 256 + 11;
    let mut types = vec![1; n];
    types[7] = 9;
    refused(
        &with(
            base.clone(),
            "tokenizer.ggml.token_type",
            Some(V::I32s(types)),
        ),
        "tokenizer.ggml.token_type[7]",
    );
    refused(
        &with(
            base.clone(),
            "tokenizer.ggml.bos_token_id",
            Some(V::U32(n as u32)),
        ),
        "tokenizer.ggml.bos_token_id",
    );
    refused(
        &with(
            base.clone(),
            "tokenizer.ggml.eos_token_id",
            Some(V::I32(-1)),
        ),
        "tokenizer.ggml.eos_token_id",
    );
    refused(
        &with(base.clone(), "tokenizer.ggml.add_bos_token", Some(s("yes"))),
        "tokenizer.ggml.add_bos_token",
    );
    refused(
        &with(base.clone(), "tokenizer.chat_template", Some(V::U32(3))),
        "tokenizer.chat_template",
    );
    let mut dup = base.clone();
    if let Some((_, V::Strs(t))) = dup.iter_mut().find(|(k, _)| *k == "tokenizer.ggml.tokens") {
        t[5] = "a".into();
    }
    refused(&dup, "duplicate token");
}

/// A tiny byte-level BPE vocabulary: the 256 byte characters, a few merges, one control token.
fn bpe_kvs() -> Vec<(&'static str, V)> {
    let mut tokens: Vec<String> = Vec::new();
    for b in 0..=255u8 {
        let c = match b {
            33..=126 | 161..=172 | 174..=255 => char::from(b),
            _ => {
                let k = (0..b)
                    .filter(|&x| !matches!(x, 33..=126 | 161..=172 | 174..=255))
                    .count() as u32;
                char::from_u32(256 + k).unwrap()
            }
        };
        tokens.push(c.to_string());
    }
    tokens.extend(["Ġh", "Ġhi", "hi", "<|end|>"].map(String::from));
    let mut types = vec![1; tokens.len()];
    types[tokens.len() - 1] = 3;
    vec![
        ("tokenizer.ggml.model", s("gpt2")),
        ("tokenizer.ggml.pre", s("gpt-2")),
        ("tokenizer.ggml.tokens", V::Strs(tokens)),
        ("tokenizer.ggml.token_type", V::I32s(types)),
        ("tokenizer.ggml.merges", strs(&["Ġ h", "Ġh i", "h i"])),
        ("tokenizer.ggml.eos_token_id", V::U32(259)),
    ]
}

#[test]
fn bpe_merges_and_errors() {
    let tok = build(&bpe_kvs()).unwrap();
    assert_eq!(tok.kind, TokenizerKind::Bpe);
    assert_eq!(tok.encode(" hi hi", false).unwrap(), [257, 257]);
    assert_eq!(tok.encode("hi!", false).unwrap(), [258, u32::from(b'!')]);
    assert_eq!(tok.decode(&[258, 257, 259], false).unwrap(), "hi hi<|end|>");
    assert_eq!(tok.decode(&[258, 257, 259], true).unwrap(), "hi hi");
    assert_eq!(tok.tokenize("hi<|end|>", false, true).unwrap(), [258, 259]);
    assert_eq!(tok.eot_ids, [259]);
    assert!(!tok.add_bos);
    let base = bpe_kvs();
    refused(
        &with(base.clone(), "tokenizer.ggml.merges", None),
        "tokenizer.ggml.merges",
    );
    refused(
        &with(base.clone(), "tokenizer.ggml.merges", Some(strs(&["Ġh"]))),
        "tokenizer.ggml.merges[0]",
    );
    refused(
        &with(
            base.clone(),
            "tokenizer.ggml.merges",
            Some(V::I32s(vec![1])),
        ),
        "tokenizer.ggml.merges[0]",
    );
    refused(
        &with(base.clone(), "tokenizer.ggml.pre", Some(s("no-such-pre"))),
        "tokenizer.ggml.pre",
    );
    refused(
        &with(
            base.clone(),
            "tokenizer.ggml.add_bos_token",
            Some(V::Bool(true)),
        ),
        "bos",
    );
}

/// A small deterministic generator for the randomized vocabularies below.
struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> usize {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 33) as usize
    }
    fn pick<'a, T>(&mut self, xs: &'a [T]) -> &'a T {
        &xs[self.next() % xs.len()]
    }
}

/// Byte-level BPE vocabularies built at random from the tiny one (texts replaced or added, merges
/// invented, some malformed, token types and special ids shuffled, Llama 3's `ignore_merges` on or
/// off): each must build or be refused with an error, never panic; each that builds must encode and
/// decode arbitrary text, and agree with the Hugging Face tokenizer written from it.
#[test]
fn random_bpe_vocabularies_never_panic() {
    const ALPHABET: &[&str] = &[
        "a", "b", "h", "i", "Ġ", "Ċ", "é", "日", "🦀", " ", "<", "|", ">", "0", "1", "!",
    ];
    const TEXTS: &[&str] = &[
        " hi hi",
        "hi!",
        "aaaa bbbb",
        "ab ab ab",
        "日本🦀",
        "<|end|>x",
        "  \n\t",
        "h",
        "",
        "0101",
        "ÿ\u{100}",
        "hihihihihihihihihi",
    ];
    let mut rng = Lcg(11);
    let (mut built, mut refused_n) = (0, 0);
    for _ in 0..300 {
        let mut kvs = bpe_kvs();
        let mut tokens: Vec<String> = match &kvs[2].1 {
            V::Strs(t) => t.clone(),
            _ => unreachable!(),
        };
        for _ in 0..rng.next() % 12 {
            let len = 1 + rng.next() % 4;
            let t: String = (0..len).map(|_| *rng.pick(ALPHABET)).collect();
            // mostly unique texts (a repeat is refused, which one case in ten exercises)
            if tokens.contains(&t) && !rng.next().is_multiple_of(10) {
                continue;
            }
            if rng.next().is_multiple_of(3) {
                let at = rng.next() % tokens.len();
                tokens[at] = t;
            } else {
                tokens.push(t);
            }
        }
        let mut merges = Vec::new();
        for _ in 0..rng.next() % 20 {
            let line = match rng.next() % 80 {
                0 => rng.pick(ALPHABET).to_string(), // no space
                1 => format!(" {}", rng.pick(ALPHABET)),
                _ => format!("{} {}", rng.pick(&tokens), rng.pick(&tokens)),
            };
            merges.push(line);
        }
        let n = tokens.len();
        let types: Vec<i32> = (0..n)
            .map(|_| match rng.next() % 400 {
                0 => (rng.next() % 8) as i32, // 7 is no type: refused
                1..=4 => (rng.next() % 7) as i32,
                _ => 1,
            })
            .collect();
        kvs = with(kvs, "tokenizer.ggml.tokens", Some(V::Strs(tokens)));
        kvs = with(kvs, "tokenizer.ggml.token_type", Some(V::I32s(types)));
        kvs = with(kvs, "tokenizer.ggml.merges", Some(V::Strs(merges)));
        let eos = (rng.next() % (n + n / 20)) as u32;
        kvs = with(kvs, "tokenizer.ggml.eos_token_id", Some(V::U32(eos)));
        if rng.next().is_multiple_of(2) {
            kvs = with(kvs, "tokenizer.ggml.pre", Some(s("llama3")));
            kvs = with(kvs, "tokenizer.ggml.add_bos_token", Some(V::Bool(false)));
        }
        let tok = match build(&kvs) {
            Ok(t) => t,
            Err(TokenizerError::Invalid(msg)) => {
                if std::env::var_os("SHOW_REFUSALS").is_some() {
                    eprintln!("{msg}");
                }
                refused_n += 1;
                continue;
            }
            Err(e) => panic!("not a tokenizer error: {e}"),
        };
        built += 1;
        let mut hf = tok.hf_tokenizer().expect("a built tokenizer writes out");
        // as `encode` (parse_special = false): control tokens written in the text are plain text
        hf.set_encode_special_tokens(true);
        for text in TEXTS {
            for parse_special in [false, true] {
                let ids = tok.tokenize(text, true, parse_special).expect("encode");
                tok.decode(&ids, false).expect("decode");
                tok.decode(&ids, true).expect("decode");
            }
            let ours = tok.encode(text, false).expect("encode");
            let theirs = hf.encode(*text, false).expect("hf encode");
            assert_eq!(ours, theirs.get_ids(), "{text:?} with {kvs:?}");
        }
    }
    assert!(
        built > 100 && refused_n > 10,
        "built {built}, refused {refused_n}"
    );
}
