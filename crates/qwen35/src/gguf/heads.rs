//! The DeltaNet's value heads, which llama.cpp's converter writes tiled where there are more
//! value heads than key heads ([`Heads`]), put back in the checkpoint's grouped order as a tensor
//! is read: whole rows, or whole runs of blocks within each row, moved as stored. Columns whose
//! heads are not whole blocks (a k-quant's 256-value blocks span two 128-channel heads of
//! `out_proj`'s input) cannot move without rounding again: they stay tiled, and the mixer puts its
//! output in that order ([`ValueHeadOrder`]).

use std::borrow::Cow;

use decider_ops::GgmlType;

use super::names::{HeadRows, Heads};
use crate::config::Qwen35Config;
use crate::value_heads::ValueHeadOrder;

/// The DeltaNet's heads of a model.
#[derive(Debug, Clone, Copy)]
pub struct ValueHeads {
    key_heads: usize,
    /// Value heads per key head: the converter reorders only where there are more than one.
    per_key: usize,
    /// Channels of a value head.
    width: usize,
    /// Query and key channels, before the value channels in `in_proj_qkv` and the conv.
    qk_channels: usize,
}

impl ValueHeads {
    pub fn of(config: &Qwen35Config) -> Self {
        ValueHeads {
            key_heads: config.linear_num_key_heads,
            per_key: config.linear_num_value_heads / config.linear_num_key_heads.max(1),
            width: config.linear_value_head_dim,
            qk_channels: 2 * config.linear_key_dim(),
        }
    }

    /// The order a tensor of `ggml_type` whose value heads are `heads` is read in: grouped, but
    /// for columns whose heads are not whole blocks, left tiled.
    pub fn order(&self, ggml_type: GgmlType, heads: Heads) -> ValueHeadOrder {
        match self.per_key > 1 && heads == Heads::Columns && !self.width.is_multiple_of(ggml_type.block_values()) {
            true => ValueHeadOrder::Tiled,
            false => ValueHeadOrder::Grouped,
        }
    }

    /// `bytes`, `rows` rows of `ggml_type`, with their value heads in [`ValueHeads::order`]; a
    /// reason where the tensor does not hold the heads the configuration says.
    pub fn ordered<'a>(
        &self,
        ggml_type: GgmlType,
        bytes: Cow<'a, [u8]>,
        rows: usize,
        heads: Heads,
    ) -> Result<Cow<'a, [u8]>, String> {
        if self.per_key <= 1 || heads == Heads::None || self.order(ggml_type, heads) == ValueHeadOrder::Tiled {
            return Ok(bytes);
        }
        let row_bytes = bytes.len() / rows.max(1);
        // Each step of the tensor (all of it, or one row) reorders `unit`-byte heads in `span`.
        let (unit, span, step) = match heads {
            Heads::None => unreachable!("returned above"),
            Heads::Rows { per_head, after_qk } => {
                let per_head = match per_head {
                    HeadRows::Width => self.width,
                    HeadRows::One => 1,
                };
                let skip = if after_qk { self.qk_channels * row_bytes } else { 0 };
                (per_head * row_bytes, skip..bytes.len(), bytes.len())
            }
            Heads::Columns => {
                (self.width / ggml_type.block_values() * ggml_type.block_bytes(), 0..row_bytes, row_bytes)
            }
        };
        let count = self.key_heads * self.per_key;
        if span.len() != count * unit {
            return Err(format!(
                "it does not hold {count} value heads of {} channels where the configuration says",
                self.width
            ));
        }
        let mut grouped = bytes.to_vec();
        for start in (0..bytes.len()).step_by(step.max(1)) {
            let span = start + span.start..start + span.end;
            self.regroup(&bytes[span.clone()], &mut grouped[span], unit);
        }
        Ok(Cow::Owned(grouped))
    }

    /// Puts `unit`-byte heads in the checkpoint's grouped order: `grouped[g · per_key + j]` is
    /// `tiled[j · key_heads + g]` (the converter's `_reorder_v_heads`, inverted).
    fn regroup(&self, tiled: &[u8], grouped: &mut [u8], unit: usize) {
        for g in 0..self.key_heads {
            for j in 0..self.per_key {
                let (to, from) = (g * self.per_key + j, j * self.key_heads + g);
                grouped[to * unit..(to + 1) * unit].copy_from_slice(&tiled[from * unit..(from + 1) * unit]);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The converter's `_reorder_v_heads`: `grouped` (value heads `[Hk, per_key]` of `unit`
    /// entries) reshaped to `[Hk, per_key, unit]` and transposed to `[per_key, Hk, unit]`.
    fn tiled(grouped: &[u8], key_heads: usize, per_key: usize, unit: usize) -> Vec<u8> {
        let mut tiled = Vec::with_capacity(grouped.len());
        for j in 0..per_key {
            for g in 0..key_heads {
                let head = g * per_key + j;
                tiled.extend_from_slice(&grouped[head * unit..(head + 1) * unit]);
            }
        }
        tiled
    }

    /// Rows and whole-block columns come back in grouped order, with 3 key heads and 6 value
    /// heads: there tiling is not its own inverse (with 2 and 4 it is), so the direction counts.
    #[test]
    fn rows_and_columns_are_put_back_in_grouped_order() {
        let heads = ValueHeads { key_heads: 3, per_key: 2, width: 2, qk_channels: 1 };
        let f32_bytes = |values: &[u8]| values.iter().flat_map(|&v| f32::from(v).to_le_bytes()).collect::<Vec<u8>>();
        // `in_proj_qkv`-like: a query/key row first (it stays), then 6 heads of 2 rows of one value.
        let grouped: Vec<u8> = (0..13).collect();
        let file = [&grouped[..1], &tiled(&grouped[1..], 3, 2, 2)].concat();
        assert_ne!(file, grouped);
        let rows = Heads::Rows { per_head: HeadRows::Width, after_qk: true };
        let read = heads.ordered(GgmlType::F32, Cow::Owned(f32_bytes(&file)), 13, rows).unwrap();
        assert_eq!(read.into_owned(), f32_bytes(&grouped));
        // `out_proj`-like: two rows of 6 heads of 2 columns, in F32 (blocks of one value).
        let row: Vec<u8> = (0..12).collect();
        let file = [tiled(&row, 3, 2, 2), tiled(&row, 3, 2, 2)].concat();
        let read = heads.ordered(GgmlType::F32, Cow::Owned(f32_bytes(&file)), 2, Heads::Columns).unwrap();
        assert_eq!(read.into_owned(), f32_bytes(&[row.clone(), row].concat()));
        // Heads of 2 columns are not whole Q4_K blocks: left as stored, and said to be tiled.
        assert_eq!(heads.order(GgmlType::Q4K, Heads::Columns), ValueHeadOrder::Tiled);
        assert_eq!(heads.order(GgmlType::F32, Heads::Columns), ValueHeadOrder::Grouped);
    }
}
