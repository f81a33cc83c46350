//! BPE pre-tokenizers by `tokenizer.ggml.pre` name, as llama.cpp's `llm_tokenizer_bpe` defines them.
//!
//! Each pre-tokenizer is a list of regexes applied in turn: every regex splits each current piece into its
//! matches and the text between them (Hugging Face `Split` with `Isolated` behaviour). The flags follow
//! llama.cpp's `llama_vocab::impl::load`: `ignore_merges` (a whole pre-token that is in the vocabulary is
//! emitted as is), the default of `add_bos`, and whether decoding cleans spaces.

/// GPT-2's split.
const GPT2: &str = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)";
/// Llama 3's split (case-insensitive contractions spelled out, digits in runs of at most three).
const LLAMA3: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
/// Qwen2's split: Llama 3's with single digits.
const QWEN2: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
/// Qwen3.5's split: Qwen2's with combining marks kept in words.
const QWEN35: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
/// DeepSeek V3 / Hunyuan-dense main split.
const DEEPSEEK3: &str = r##"[!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"##;
/// Tekken (Mistral Nemo): case-aware words.
const TEKKEN: &str = r"[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))*((?=[\p{L}])([^A-Z]))+|[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))+((?=[\p{L}])([^A-Z]))*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+";
/// GPT-4o / Llama 4.
const GPT4O: &str = r"[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))*((?=[\p{L}])([^A-Z]))+(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))+((?=[\p{L}])([^A-Z]))*(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+";
/// BLOOM / Poro / GPT-3 Finnish.
const BLOOM: &str = r" ?[^(\s|.,!?…。，、।۔،)]+";
/// Bailing MoE (possessive quantifiers made greedy, as llama.cpp does).
const BAILINGMOE: &str = r"'(?:[sSdDmMtT]|[lL][lL]|[vV][eE]|[rR][eE])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+";
/// Seed-Coder.
const SEED_CODER: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1}| ?[^\s\p{L}\p{N}\r\n]+|\s*[\r\n]+|\s+(?!\S)|\s+";

/// One pre-tokenizer: its regexes and the vocabulary flags llama.cpp ties to it.
#[derive(Debug, Clone, Copy)]
pub(super) struct PreSpec {
    /// Regexes applied in turn.
    pub regexes: &'static [&'static str],
    /// Emit a whole pre-token directly when it is a vocabulary token.
    pub ignore_merges: bool,
    /// Default of `add_bos` (before `tokenizer.ggml.add_bos_token`).
    pub add_bos: bool,
    /// Decoding cleans spaces (llama.cpp `clean_spaces`).
    pub clean_spaces: bool,
}

const fn spec(
    regexes: &'static [&'static str],
    ignore_merges: bool,
    add_bos: bool,
    clean_spaces: bool,
) -> PreSpec {
    PreSpec {
        regexes,
        ignore_merges,
        add_bos,
        clean_spaces,
    }
}

const DEFAULT_RES: &[&str] = &[r"[\p{P}\$\+<=>\^~\|]+", GPT2, r"\p{N}+", "[0-9][0-9][0-9]"];
const LLAMA3_RES: &[&str] = &[LLAMA3];
const QWEN2_RES: &[&str] = &[QWEN2];
const GPT2_RES: &[&str] = &[GPT2];
const STARCODER_RES: &[&str] = &[r"\p{N}", GPT2];
const FALCON_RES: &[&str] = &[r"[\p{P}\$\+<=>\^~\|`]+", GPT2, "[0-9][0-9][0-9]"];
const DEEPSEEK_CODER_RES: &[&str] = &[
    "[\r\n]",
    r"\s?\p{L}+",
    r"\s?\p{P}+",
    "[一-龥ࠀ-一가-퟿]+",
    r"\p{N}",
];
const DEEPSEEK3_RES: &[&str] = &[r"\p{N}{1,3}", "[一-龥぀-ゟ゠-ヿ]+", DEEPSEEK3];

/// The pre-tokenizer llama.cpp uses for `tokenizer.ggml.pre = name`, or `None` if Cinder does not know it.
pub(super) fn pre_spec(name: &str) -> Option<PreSpec> {
    Some(match name {
        "default" => spec(DEFAULT_RES, false, false, true),
        "llama3" | "llama-v3" | "llama-bpe" | "falcon3" | "falcon-h1" | "pixtral" | "midm-2.0"
        | "lfm2" | "jina-v5-nano" => spec(LLAMA3_RES, true, true, true),
        "dbrx" | "smaug-bpe" => spec(LLAMA3_RES, false, false, true),
        "chatglm-bpe" | "glm4" => spec(LLAMA3_RES, false, false, true),
        "deepseek-coder" => spec(DEEPSEEK_CODER_RES, false, false, false),
        "deepseek-v3" | "hunyuan-dense" | "joyai-llm" => spec(DEEPSEEK3_RES, false, false, false),
        "falcon" => spec(FALCON_RES, false, false, true),
        "gpt-2" | "phi-2" | "jina-es" | "jina-de" | "gigachat" | "jina-v2-es" | "jina-v2-de"
        | "a.x-4.0" | "mellum" | "modern-bert" | "jina-v1-en" | "jina-v2-code" | "roberta-bpe"
        | "mpt" | "olmo" | "jais" | "exaone4" => spec(GPT2_RES, false, false, true),
        "trillion" | "granite-docling" => spec(GPT2_RES, false, false, false),
        "starcoder" | "refact" | "codeshell" | "exaone" | "minerva-7b" | "mellum2" => {
            spec(STARCODER_RES, false, false, true)
        }
        "command-r" | "smollm" => spec(STARCODER_RES, false, false, false),
        "qwen2" | "deepseek-r1-qwen" | "kormo" | "f2llmv2" | "hunyuan" | "solar-open"
        | "grok-2" => spec(QWEN2_RES, false, false, false),
        "stablelm2" | "megrez" => spec(QWEN2_RES, false, false, true),
        "qwen35" => spec(&[QWEN35], false, false, false),
        "poro-chat" => spec(&[BLOOM], false, false, false),
        "bloom" | "gpt3-finnish" => spec(&[BLOOM], false, false, true),
        "viking" => spec(&[BLOOM, r"\p{N}"], false, false, false),
        "tekken" => spec(&[TEKKEN], true, true, false),
        "gpt-4o" | "llama4" | "kanana2" | "talkie" | "minimax-m2" => {
            spec(&[GPT4O], false, false, false)
        }
        "bailingmoe" | "bailingmoe2" | "llada-moe" => spec(&[BAILINGMOE], false, false, false),
        "seed-coder" => spec(&[SEED_CODER], false, false, false),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every regex in the table compiles with the engine the Hugging Face pre-tokenizer uses.
    #[test]
    fn all_regexes_compile() {
        let names = [
            "default",
            "llama3",
            "dbrx",
            "deepseek-coder",
            "deepseek-v3",
            "falcon",
            "gpt-2",
            "trillion",
            "starcoder",
            "smollm",
            "qwen2",
            "stablelm2",
            "qwen35",
            "poro-chat",
            "bloom",
            "viking",
            "tekken",
            "gpt-4o",
            "bailingmoe",
            "seed-coder",
        ];
        for name in names {
            let spec = pre_spec(name).unwrap();
            for re in spec.regexes {
                tokenizers::pre_tokenizers::split::Split::new(
                    tokenizers::pre_tokenizers::split::SplitPattern::Regex(re.to_string()),
                    tokenizers::SplitDelimiterBehavior::Isolated,
                    false,
                )
                .unwrap_or_else(|e| panic!("{name}: {re}: {e}"));
            }
        }
        assert!(pre_spec("no-such-pre").is_none());
    }
}
