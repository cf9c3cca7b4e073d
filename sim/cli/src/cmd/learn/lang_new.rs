//! English lines a lesson gains whose Traditional Chinese is still to be written: kept here,
//! in one place, so that the zh-TW translator moves each into `lang_lessons.rs`'s tables with
//! its translation. Until then `--lang zh-TW` prints each marked `[待翻譯]` ("to be
//! translated") before its English, so a missing translation shows instead of passing for
//! done. Empty: every line issue #32's lessons print is translated (`sim/cli/tests/zh_tw.rs`
//! fails on English in any lesson's zh-TW output, so a line added here fails it too).

/// English line → the line `--lang zh-TW` prints until it is translated.
pub(super) const ZH_TW: &[(&str, &str)] = &[];
