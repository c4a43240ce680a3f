//! Text in, sentences of vocabulary indices out: reading a plain-text corpus, the held-out
//! split, and the encoding into training sentences.
//!
//! Invariants:
//! - A [`RawCorpus`] holds every token as a raw id (index into `names`, in order of first
//!   appearance) and the start of every non-empty line; lines are sentences.
//! - The held-out part is the last `fraction` of the tokens (by position, so it is text the
//!   model never trained on); the vocabulary is built from the training part only.
//! - A [`Sentences`] value holds only in-vocabulary words; every sentence is non-empty and has at
//!   most [`MAX_SENTENCE`] words (longer lines are cut, as word2vec.c does), and sentences are in
//!   corpus order so that contiguous ranges of them are contiguous text.

use std::collections::HashMap;
use std::path::Path;

use anyhow::{Context, bail, ensure};

use super::vocab::{OOV, Vocab};

/// Longest sentence, in words (word2vec.c's `MAX_SENTENCE_LENGTH`).
pub const MAX_SENTENCE: usize = 1000;

/// A tokenised corpus before the vocabulary cut.
#[derive(Clone, Debug, Default)]
pub struct RawCorpus {
    /// Raw token ids in text order.
    pub tokens: Vec<u32>,
    /// Index in `tokens` of the first token of every non-empty line, increasing.
    pub line_starts: Vec<usize>,
    /// The word of each raw id.
    pub names: Vec<String>,
    /// For synthetic corpora: the planted topic of each raw id (`None` for common words).
    pub topics: Option<Vec<Option<u32>>>,
}

impl RawCorpus {
    /// Reads a plain-text file: words separated by whitespace, one sentence per line.
    pub fn read(path: &Path) -> anyhow::Result<Self> {
        let bytes = std::fs::read(path)
            .with_context(|| format!("reading the corpus {}", path.display()))?;
        Self::parse(&bytes).with_context(|| format!("in the corpus {}", path.display()))
    }

    /// Tokenises text (see [`RawCorpus::read`]); errors name the 1-based line.
    pub fn parse(bytes: &[u8]) -> anyhow::Result<Self> {
        let mut corpus = Self::default();
        let mut ids: HashMap<&[u8], u32> = HashMap::new();
        for (line_no, line) in bytes.split(|&b| b == b'\n').enumerate() {
            if let Some(col) = line.iter().position(|&b| b == 0) {
                bail!(
                    "line {}: NUL byte at column {}: this is not a text file",
                    line_no + 1,
                    col + 1
                );
            }
            if let Err(e) = std::str::from_utf8(line) {
                bail!(
                    "line {}: not UTF-8 text (invalid byte at column {})",
                    line_no + 1,
                    e.valid_up_to() + 1
                );
            }
            let start = corpus.tokens.len();
            for word in line
                .split(u8::is_ascii_whitespace)
                .filter(|w| !w.is_empty())
            {
                let next = ids.len() as u32;
                let id = *ids.entry(word).or_insert_with(|| {
                    corpus
                        .names
                        .push(String::from_utf8_lossy(word).into_owned());
                    next
                });
                corpus.tokens.push(id);
            }
            if corpus.tokens.len() > start {
                corpus.line_starts.push(start);
            }
        }
        ensure!(!corpus.tokens.is_empty(), "the file contains no words");
        ensure!(
            corpus.names.len() < OOV as usize,
            "too many distinct words ({})",
            corpus.names.len()
        );
        Ok(corpus)
    }

    /// Splits into (training, held-out) token ranges: the held-out part is the last
    /// `fraction` of the tokens. Returns the first held-out token index.
    pub fn heldout_start(&self, fraction: f64) -> anyhow::Result<usize> {
        ensure!(
            (0.0..0.9).contains(&fraction),
            "--heldout must be in [0, 0.9) (a fraction of the corpus), got {fraction}"
        );
        let n = self.tokens.len();
        let start = n - ((n as f64 * fraction).round() as usize).min(n);
        ensure!(
            start > 0,
            "the corpus has {n} words: none left for training after holding out {fraction}"
        );
        Ok(start)
    }

    /// The sentences of tokens `range`, encoded through `vocab` (out-of-vocabulary words
    /// dropped, lines cut at [`MAX_SENTENCE`] words).
    pub fn sentences(&self, range: std::ops::Range<usize>, vocab: &Vocab) -> Sentences {
        let mut out = Sentences {
            words: Vec::new(),
            starts: vec![0],
        };
        // Line boundaries inside the range, plus the range start (a line may straddle it).
        let first = self.line_starts.partition_point(|&s| s <= range.start);
        let bounds = std::iter::once(range.start)
            .chain(
                self.line_starts[first..]
                    .iter()
                    .copied()
                    .take_while(|&s| s < range.end),
            )
            .chain(std::iter::once(range.end))
            .collect::<Vec<_>>();
        for line in bounds.windows(2) {
            let mut len = 0;
            for &t in &self.tokens[line[0]..line[1]] {
                let w = vocab.index_of_raw[t as usize];
                if w == OOV {
                    continue;
                }
                out.words.push(w);
                len += 1;
                if len == MAX_SENTENCE {
                    out.starts.push(out.words.len());
                    len = 0;
                }
            }
            if len > 0 {
                out.starts.push(out.words.len());
            }
        }
        out
    }
}

/// Sentences of vocabulary indices, stored flat.
#[derive(Clone, Debug, Default)]
pub struct Sentences {
    /// All words, sentence after sentence.
    pub words: Vec<u32>,
    /// `starts[i]..starts[i + 1]` is sentence `i`; `starts[0] == 0`, last is `words.len()`.
    pub starts: Vec<usize>,
}

impl Sentences {
    /// Number of sentences.
    pub fn len(&self) -> usize {
        self.starts.len() - 1
    }

    /// Whether there is no sentence.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Sentence `i`.
    pub fn get(&self, i: usize) -> &[u32] {
        &self.words[self.starts[i]..self.starts[i + 1]]
    }

    /// The sentences of part `p` of `parts` contiguous parts of about equal word counts
    /// (a sentence belongs to the part its first word falls in).
    pub fn part(&self, p: usize, parts: usize) -> std::ops::Range<usize> {
        let n = self.words.len();
        let bound = |q: usize| self.starts[..self.len()].partition_point(|&s| s < q * n / parts);
        bound(p)..bound(p + 1)
    }

    /// Words in sentences `range`.
    pub fn words_in(&self, range: std::ops::Range<usize>) -> usize {
        self.starts[range.end] - self.starts[range.start]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vocab(c: &RawCorpus, min_count: u64) -> Vocab {
        Vocab::build(&c.tokens, c.names.len(), min_count, |r| {
            c.names[r as usize].clone()
        })
        .unwrap()
    }

    #[test]
    fn parses_words_and_lines() {
        let c = RawCorpus::parse(b"the cat  sat\n\n\tthe dog\r\nsat the end").unwrap();
        assert_eq!(c.names, ["the", "cat", "sat", "dog", "end"]);
        assert_eq!(c.tokens, [0, 1, 2, 0, 3, 2, 0, 4]);
        assert_eq!(c.line_starts, [0, 3, 5]);
    }

    #[test]
    fn malformed_text_is_an_error_naming_the_line() {
        assert!(
            RawCorpus::parse(b"")
                .unwrap_err()
                .to_string()
                .contains("no words")
        );
        assert!(
            RawCorpus::parse(b" \n\n  \n")
                .unwrap_err()
                .to_string()
                .contains("no words")
        );
        let err = RawCorpus::parse(b"ok\nbad \xff word\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("line 2") && err.contains("column 5"), "{err}");
        let err = RawCorpus::parse(b"a\nb\nc\0").unwrap_err().to_string();
        assert!(err.contains("line 3") && err.contains("NUL"), "{err}");
    }

    #[test]
    fn sentences_drop_unknown_words_and_cut_long_lines() {
        let mut text = String::from("a b rare a\n");
        for _ in 0..2500 {
            text.push_str("b ");
        }
        text.push('\n');
        let c = RawCorpus::parse(text.as_bytes()).unwrap();
        let v = vocab(&c, 2);
        let s = c.sentences(0..c.tokens.len(), &v);
        let lens: Vec<usize> = (0..s.len()).map(|i| s.get(i).len()).collect();
        assert_eq!(lens, [3, 1000, 1000, 500]);
        assert_eq!(s.get(0), [1, 0, 1]); // b is the most frequent, so index 0
    }

    #[test]
    fn heldout_is_the_tail_and_sentences_respect_the_split() {
        let c = RawCorpus::parse(b"a b c d\ne f g h i j").unwrap();
        let start = c.heldout_start(0.3).unwrap();
        assert_eq!(start, 7);
        let v = vocab(&c, 1);
        let train = c.sentences(0..start, &v);
        let held = c.sentences(start..c.tokens.len(), &v);
        assert_eq!((train.len(), train.words.len()), (2, 7));
        assert_eq!((held.len(), held.words.len()), (1, 3));
        assert!(c.heldout_start(0.95).is_err());
        assert!(RawCorpus::parse(b"a").unwrap().heldout_start(0.5).is_err());
    }

    #[test]
    fn parts_are_contiguous_and_cover_everything() {
        let text: String = (0..50)
            .map(|i| format!("{}\n", "x y ".repeat(i % 7 + 1)))
            .collect();
        let c = RawCorpus::parse(text.as_bytes()).unwrap();
        let s = c.sentences(0..c.tokens.len(), &vocab(&c, 1));
        for parts in [1, 2, 3, 8] {
            let ranges: Vec<_> = (0..parts).map(|p| s.part(p, parts)).collect();
            assert_eq!(ranges[0].start, 0);
            assert_eq!(ranges[parts - 1].end, s.len());
            for w in ranges.windows(2) {
                assert_eq!(w[0].end, w[1].start);
            }
            let words: Vec<usize> = ranges.iter().map(|r| s.words_in(r.clone())).collect();
            let (min, max) = (words.iter().min().unwrap(), words.iter().max().unwrap());
            assert!(max - min <= 28, "{parts} parts: {words:?}");
        }
    }
}
