// The one parameter every attention kernel takes (by value; mirrored by `AttnArgs` in
// crates/cuda/src/backend/attention.rs, field for field). Per-step metadata lives in fixed
// device buffers written before launch: positions[t], token_seq[t], seq_q_start[s]
// (first query token of sequence s; seq_q_start[S] = T), seq_bt_off[s] (offset of
// sequence s in block_tables). Pool layout per layer: [block][slot][kv_head][head_dim].
struct AttnArgs {
    const float* q;          // [T][n_heads * head_dim] f32
    bf16_t* out;             // [T][n_heads * head_dim] bf16
    const bf16_t* k_pool;
    const bf16_t* v_pool;
    const u32* positions;
    const u32* token_seq;
    const u32* seq_q_start;
    const u32* seq_bt_off;
    const u32* block_tables;
    float* parts;            // split partials (kernel-specific layout)
    u32* counters;           // zero between launches (attention_mma)
    int n_heads, n_kv_heads, head_dim, block_size;
    int part_tokens;         // tokens the partials have room for (attention_mma)
    int grid_splits;         // blocks per (sequence, KV head, row chunk) in gridDim.z
    float scale;             // 1 / sqrt(head_dim)
    float scale_log2;        // scale * log2(e)
    int prefill_min_q;       // > 0: sequences of at least this many query tokens run on
                             // attention_flash, and attention_mma skips them
    int split_keys_per_q;    // attention_mma: keys a split of a decode/verify sequence
                             // holds per query token
    int prefill_split_keys;  // attention_mma: keys a split of a prefill chunk holds (0:
                             // prefill chunks unsplit)
};
