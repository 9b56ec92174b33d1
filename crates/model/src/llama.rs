//! The Llama-family forward pass (Llama 2/3.x, SmolLM2, Qwen2/2.5, Qwen3 with its
//! per-head q/k norms, Mistral without sliding window, DeepSeek-R1-Distill, the
//! mixture-of-experts Qwen3-MoE and Mixtral, and DeepSeek-V3/R1 with latent attention and
//! shared experts), written once against [`Backend`].

use crate::config::ModelConfig;
use crate::runner::{KvPoolSize, Logits, ModelRunner, RowMasks, ShardRunner, StepGraph, StepInput};
use crate::shard::RankShard;
use crate::weight_slice::Part;
use crate::weights::WeightSource;
use anyhow::{ensure, Result};
use std::ops::Range;
use wring_backend::{
    AttnShape, Backend, Expert, KvSpec, MlaLayer, MlaQuery, MlaShape, MoeLayer, RopeSpec,
};

/// Projections of one input: separate matrices, or their rows stacked into one
/// (`Backend::fuses_projections`: one GEMM for all of them).
enum Proj<M> {
    Split(Vec<M>),
    Fused(M),
}

impl<M> Proj<M> {
    /// The matrix that reads the projection's input first (`Backend::next_input_for`).
    fn first(&self) -> &M {
        match self {
            Proj::Split(p) => &p[0],
            Proj::Fused(m) => m,
        }
    }
}

struct Layer<B: Backend> {
    attn_norm: B::Vector,
    attn: Attn<B>,
    o: B::Matrix,
    ffn_norm: B::Vector,
    ffn: Ffn<B>,
}

/// A layer's attention projections.
enum Attn<B: Backend> {
    /// q, k and v heads (the Llama family).
    Heads {
        qkv: Proj<B::Matrix>,
        q_bias: Option<B::Vector>,
        k_bias: Option<B::Vector>,
        v_bias: Option<B::Vector>,
        /// Qwen3's per-head q and k norms (before RoPE).
        q_norm: Option<B::Vector>,
        k_norm: Option<B::Vector>,
    },
    /// Multi-head latent attention ([`Backend::latent_attention`]).
    Latent(MlaLayer<B::Vector, B::Matrix>),
}

impl<B: Backend> Attn<B> {
    /// The matrix that reads the normed input first (`Backend::next_input_for`).
    fn first(&self) -> &B::Matrix {
        match self {
            Attn::Heads { qkv, .. } => qkv.first(),
            Attn::Latent(m) => match &m.q {
                MlaQuery::Direct(q) => q,
                MlaQuery::LowRank { a, .. } => a,
            },
        }
    }
}

/// A layer's feed-forward.
enum Ffn<B: Backend> {
    /// SwiGLU: gate, up, then down.
    Dense {
        gate_up: Proj<B::Matrix>,
        down: B::Matrix,
    },
    /// Routed experts ([`Backend::moe_ffn`]).
    Moe(MoeLayer<B::Vector, B::Matrix>),
}

pub struct LlamaRunner<B: Backend> {
    backend: B,
    cfg: ModelConfig,
    /// What this rank holds (the whole model on one rank).
    shard: RankShard,
    embed: B::Matrix,
    layers: Vec<Layer<B>>,
    norm: B::Vector,
    /// None when tied to the embedding.
    lm_head: Option<B::Matrix>,
    rope: RopeSpec,
    kv: KvSpec,
    /// Every layer's q|k|v and gate|up are stacked (`Proj::Fused`): what the flow with the
    /// norms inside the projections needs.
    projections_fused: bool,
    /// How the last step ran (`ModelRunner::last_step_graph`).
    last_graph: StepGraph,
}

/// Whether a step runs [`LlamaRunner::compute_norm_in_linear`]: the backend asks for it
/// (`Backend::fuses_norm_into_linear`, per step), the projections are stacked, and the
/// model is not split (a rank's o and down outputs need their all-reduce before the add).
/// The one place the choice is made.
pub fn takes_norm_in_linear_flow(
    sharded: bool,
    projections_fused: bool,
    backend_asks: bool,
) -> bool {
    backend_asks && projections_fused && !sharded
}

impl<B: Backend> LlamaRunner<B> {
    /// Uploads every weight from `src` (one tensor at a time) and allocates the KV pool.
    pub fn new(
        backend: B,
        cfg: ModelConfig,
        src: &WeightSource,
        num_blocks: usize,
        block_size: usize,
    ) -> Result<Self> {
        let shard = RankShard::whole(&cfg);
        Self::new_shard(
            backend,
            cfg,
            src,
            shard,
            KvPoolSize::Blocks(num_blocks),
            block_size,
        )
    }

    /// One tensor-parallel rank: uploads only `shard`'s part of every weight (see
    /// [`crate::shard`]) and a KV pool for its KV heads. `backend` must belong to a
    /// collective group of `shard.ranks` ranks ([`Backend::group_ranks`]).
    pub fn new_shard(
        mut backend: B,
        cfg: ModelConfig,
        src: &WeightSource,
        shard: RankShard,
        kv_size: KvPoolSize,
        block_size: usize,
    ) -> Result<Self> {
        ensure!(
            backend.group_ranks() == shard.ranks,
            "{} joins a group of {} rank(s), but the model is split {} ways",
            backend.name(),
            backend.group_ranks(),
            shard.ranks
        );
        cfg.refuse_unsupported(&backend.name(), |op| backend.supports(op))?;
        ensure!(
            shard.ranks == 1 || (cfg.moe.is_none() && cfg.mla.is_none()),
            "tensor parallelism of mixture-of-experts or latent-attention models (model_type {}) is not supported yet; run it on one device",
            cfg.architecture
        );
        let (h, hd) = (cfg.hidden_size, cfg.head_dim);
        let (q_dims, kv_dims) = (shard.q_dims(hd), shard.kv_dims(hd));
        let (qd, kvd) = (
            cfg.num_heads * cfg.head_dim,
            cfg.num_kv_heads * cfg.head_dim,
        );
        let inter = cfg.intermediate_size;
        // The whole matrix when this rank holds all of it (one rank: loads exactly as
        // before, quantized checkpoints stay quantized).
        let rows = |r: &Range<usize>, full: usize| whole_or(r, full, Part::Rows(r.clone()));
        let cols = |c: &Range<usize>, full: usize| whole_or(c, full, Part::Cols(c.clone()));
        let vocab = rows(&shard.vocab, cfg.vocab_size);
        let embed = backend.upload_matrix(src.matrix_part(
            "token_embd.weight",
            cfg.vocab_size,
            h,
            &vocab,
        )?)?;
        let mut layers = Vec::with_capacity(cfg.num_layers);
        for l in 0..cfg.num_layers {
            let n = |s: &str| format!("blk.{l}.{s}");
            // Fused projections (CUDA, CPU): the rows of the parts stacked into one matrix
            // (not for a quantized checkpoint: stacking would dequantise its weights).
            let fuse = backend.fuses_projections()
                && !matches!(src, WeightSource::Safetensors(s) if s.quant.is_some())
                && ["attn_q.bias", "attn_k.bias", "attn_v.bias"]
                    .iter()
                    .all(|b| !src.has(&cfg, &n(b)));
            // q and k are normed between the projection and RoPE, which the fused
            // q|k|v op applies itself: a model with q/k norms projects them apart.
            let fuse_qkv = fuse && !cfg.qk_norm;
            let mut proj = |parts: &[(&str, usize, Part)], fuse: bool| -> Result<Proj<B::Matrix>> {
                if !fuse {
                    let m = parts.iter().map(|(s, full, part)| {
                        src.weight_part(&n(s), *full, h, part)?.upload(&mut backend)
                    });
                    return Ok(Proj::Split(m.collect::<Result<_>>()?));
                }
                let mut data = Vec::new();
                let mut rows = 0;
                for (s, full, part) in parts {
                    let m = src.matrix_part(&n(s), *full, h, part)?;
                    rows += m.rows;
                    data.extend(m.data);
                }
                Ok(Proj::Fused(backend.upload_matrix(
                    wring_backend::HostMatrix {
                        rows,
                        cols: h,
                        data,
                    },
                )?))
            };
            let qkv = match cfg.mla {
                Some(_) => None,
                None => Some(proj(
                    &[
                        ("attn_q.weight", qd, rows(&q_dims, qd)),
                        ("attn_k.weight", kvd, rows(&kv_dims, kvd)),
                        ("attn_v.weight", kvd, rows(&kv_dims, kvd)),
                    ],
                    fuse_qkv,
                )?),
            };
            let ffn = match cfg.moe_layer(l) {
                Some(m) => Ffn::Moe(load_moe(&mut backend, src, &n, h, m)?),
                None => {
                    let gate_up = proj(
                        &[
                            ("ffn_gate.weight", inter, rows(&shard.intermediate, inter)),
                            ("ffn_up.weight", inter, rows(&shard.intermediate, inter)),
                        ],
                        fuse,
                    )?;
                    let down = src
                        .weight_part(
                            &n("ffn_down.weight"),
                            h,
                            inter,
                            &cols(&shard.intermediate, inter),
                        )?
                        .upload(&mut backend)?;
                    Ffn::Dense { gate_up, down }
                }
            };
            let o = match &cfg.mla {
                // Not split (a latent-attention model runs on one rank).
                Some(m) => src.weight(&n("attn_output.weight"), h, cfg.num_heads * m.v_head_dim)?,
                None => src.weight_part(&n("attn_output.weight"), h, qd, &cols(&q_dims, qd))?,
            }
            .upload(&mut backend)?;
            let attn = match (qkv, &cfg.mla) {
                (Some(qkv), _) => {
                    let mut bias =
                        |s: &str, len, range: &Range<usize>| -> Result<Option<B::Vector>> {
                            if src.has(&cfg, &n(s)) {
                                let v = src.vector_part(&n(s), len, range.clone())?;
                                Ok(Some(backend.upload_vector(&v)?))
                            } else {
                                Ok(None)
                            }
                        };
                    let (q_bias, k_bias, v_bias) = (
                        bias("attn_q.bias", qd, &q_dims)?,
                        bias("attn_k.bias", kvd, &kv_dims)?,
                        bias("attn_v.bias", kvd, &kv_dims)?,
                    );
                    let (q_norm, k_norm) = if cfg.qk_norm {
                        (
                            Some(
                                backend
                                    .upload_vector(&src.vector(&n("attn_q_norm.weight"), hd)?)?,
                            ),
                            Some(
                                backend
                                    .upload_vector(&src.vector(&n("attn_k_norm.weight"), hd)?)?,
                            ),
                        )
                    } else {
                        (None, None)
                    };
                    Attn::Heads {
                        qkv,
                        q_bias,
                        k_bias,
                        v_bias,
                        q_norm,
                        k_norm,
                    }
                }
                (None, Some(m)) => Attn::Latent(load_mla(&mut backend, src, &n, &cfg, m)?),
                (None, None) => {
                    unreachable!("q|k|v is loaded for every model without latent attention")
                }
            };
            let attn_norm = backend.upload_vector(&src.vector(&n("attn_norm.weight"), h)?)?;
            let ffn_norm = backend.upload_vector(&src.vector(&n("ffn_norm.weight"), h)?)?;
            layers.push(Layer {
                attn_norm,
                attn,
                o,
                ffn_norm,
                ffn,
            });
        }
        let norm = backend.upload_vector(&src.vector("output_norm.weight", h)?)?;
        let lm_head = if src.has(&cfg, "output.weight") {
            Some(
                src.weight_part("output.weight", cfg.vocab_size, h, &vocab)?
                    .upload(&mut backend)?,
            )
        } else {
            None
        };
        let mut kv = KvSpec {
            layers: cfg.num_layers,
            num_blocks: 0,
            block_size,
            n_kv_heads: shard.n_kv_heads(),
            head_dim: cfg.head_dim,
        };
        kv.num_blocks = match kv_size {
            KvPoolSize::Blocks(n) => n,
            KvPoolSize::DeviceShare {
                utilization,
                min_blocks,
            } => {
                let attn = AttnShape {
                    n_heads: shard.n_heads(),
                    n_kv_heads: shard.n_kv_heads(),
                    head_dim: cfg.head_dim,
                };
                let n = backend.kv_blocks_for_memory(utilization, kv, attn)?;
                ensure!(
                    n >= min_blocks,
                    "{}: the KV cache that fits under --gpu-memory-utilization {utilization} holds {n} blocks of \
 {block_size} tokens, fewer than one sequence of the context length needs ({min_blocks}); raise \
 --gpu-memory-utilization, lower --max-model-len, or use smaller weights (--gpu-weights fp8)",
                    backend.name()
                );
                n
            }
        };
        backend.alloc_kv(kv)?;
        let rope = RopeSpec {
            inv_freq: cfg.rope_inv_freq(),
            interleaved: cfg.rope_interleaved,
        };
        let projections_fused = layers.iter().all(|w| {
            matches!(
                (&w.attn, &w.ffn),
                (
                    Attn::Heads {
                        qkv: Proj::Fused(_),
                        ..
                    },
                    Ffn::Dense {
                        gate_up: Proj::Fused(_),
                        ..
                    }
                )
            )
        });
        Ok(Self {
            backend,
            cfg,
            shard,
            embed,
            layers,
            norm,
            lm_head,
            rope,
            kv,
            projections_fused,
            last_graph: StepGraph::Eager,
        })
    }
}

/// One mixture-of-experts layer's router and experts (`n` names the layer's tensors):
/// each expert's gate and up rows stacked into one matrix ([`Expert::gate_up`]), the
/// router (and its correction bias) kept in f32 ([`MoeLayer::router`]), the shared experts
/// as one more expert; the backend checks the layer before any step
/// ([`Backend::prepare_moe`]).
fn load_moe<B: Backend>(
    backend: &mut B,
    src: &WeightSource,
    n: &dyn Fn(&str) -> String,
    h: usize,
    m: &crate::config::MoeConfig,
) -> Result<MoeLayer<B::Vector, B::Matrix>> {
    let router = src.matrix(&n("ffn_gate_inp.weight"), m.num_experts, h)?;
    let router = backend.upload_vector(&router.data)?;
    let expert = |backend: &mut B, kind: &str, ei: usize| -> Result<Expert<B::Matrix>> {
        let name = |part: &str| n(&format!("ffn_{part}_{kind}.weight"));
        let mut data = src.matrix(&name("gate"), ei, h)?.data;
        data.extend(src.matrix(&name("up"), ei, h)?.data);
        let gate_up = backend.upload_matrix(wring_backend::HostMatrix {
            rows: 2 * ei,
            cols: h,
            data,
        })?;
        let down = src.weight(&name("down"), h, ei)?.upload(backend)?;
        Ok(Expert { gate_up, down })
    };
    let experts = (0..m.num_experts)
        .map(|e| {
            // `ffn_gate_exps.{e}.weight`: the kind carries the expert's index.
            expert(backend, &format!("exps.{e}"), m.expert_intermediate_size)
        })
        .collect::<Result<_>>()?;
    let shared = match m.shared_intermediate_size {
        0 => None,
        si => Some(expert(backend, "shexp", si)?),
    };
    let correction_bias = if m.correction_bias {
        let b = src.vector(&n("exp_probs_b.bias"), m.num_experts)?;
        Some(backend.upload_vector(&b)?)
    } else {
        None
    };
    let layer = MoeLayer {
        router,
        experts,
        routing: m.routing(),
        correction_bias,
        shared,
    };
    backend.prepare_moe(&layer)?;
    Ok(layer)
}

/// One latent-attention layer's projections and norms (`n` names the layer's tensors).
fn load_mla<B: Backend>(
    backend: &mut B,
    src: &WeightSource,
    n: &dyn Fn(&str) -> String,
    cfg: &ModelConfig,
    m: &crate::config::MlaConfig,
) -> Result<MlaLayer<B::Vector, B::Matrix>> {
    let (h, heads) = (cfg.hidden_size, cfg.num_heads);
    let qk = heads * m.qk_head_dim();
    let q = match m.q_lora_rank {
        None => MlaQuery::Direct(src.weight(&n("attn_q.weight"), qk, h)?.upload(backend)?),
        Some(r) => MlaQuery::LowRank {
            a: src.weight(&n("attn_q_a.weight"), r, h)?.upload(backend)?,
            norm: backend.upload_vector(&src.vector(&n("attn_q_a_norm.weight"), r)?)?,
            b: src.weight(&n("attn_q_b.weight"), qk, r)?.upload(backend)?,
        },
    };
    let r = m.kv_lora_rank;
    Ok(MlaLayer {
        q,
        kv_a: src
            .weight(&n("attn_kv_a_mqa.weight"), r + m.qk_rope_head_dim, h)?
            .upload(backend)?,
        kv_norm: backend.upload_vector(&src.vector(&n("attn_kv_a_norm.weight"), r)?)?,
        kv_b: src
            .weight(
                &n("attn_kv_b.weight"),
                heads * (m.qk_nope_head_dim + m.v_head_dim),
                r,
            )?
            .upload(backend)?,
        shape: MlaShape {
            n_heads: heads,
            q_lora_rank: m.q_lora_rank,
            kv_lora_rank: r,
            nope: m.qk_nope_head_dim,
            rope: m.qk_rope_head_dim,
            v: m.v_head_dim,
            eps: cfg.rms_norm_eps,
            score_factor: cfg.rope_scaling.score_factor(),
            rope_scale: cfg.rope_scaling.attention_factor(),
        },
    })
}

/// `Part::All` when `range` is all of `0..full`, else `part`.
fn whole_or(range: &Range<usize>, full: usize, part: Part) -> Part {
    if *range == (0..full) {
        Part::All
    } else {
        part
    }
}

impl<B: Backend> LlamaRunner<B> {
    /// This rank's attention heads.
    fn attn_shape(&self) -> AttnShape {
        AttnShape {
            n_heads: self.shard.n_heads(),
            n_kv_heads: self.shard.n_kv_heads(),
            head_dim: self.cfg.head_dim,
        }
    }

    /// The ops of one step, from the staged metadata to the logits tensor. The residual
    /// add that ends a layer is fused with the norm that starts the next one. On a
    /// tensor-parallel rank the heads, the intermediate size and the vocabulary are this
    /// rank's part, the o and down outputs are partial sums completed by one all-reduce
    /// each, and the logits are this rank's vocabulary slice.
    fn compute(&mut self) -> B::Tensor {
        let sharded = self.shard.ranks > 1;
        if takes_norm_in_linear_flow(
            sharded,
            self.projections_fused,
            self.backend.fuses_norm_into_linear(),
        ) {
            return self.compute_norm_in_linear();
        }
        let shape = self.attn_shape();
        let b = &mut self.backend;
        let c = &self.cfg;
        let eps = c.rms_norm_eps;
        let mut x = if sharded {
            // Ids outside this rank's vocabulary give zero rows; the sum has every row.
            let mut x = b.embed_vocab_shard(&self.embed, self.shard.vocab.start);
            b.all_reduce_sum(&mut x);
            x
        } else {
            b.embed(&self.embed)
        };
        let mut pending: Option<B::Tensor> = None;
        for (l, w) in self.layers.iter().enumerate() {
            b.next_input_for(w.attn.first());
            let h = match pending.take() {
                None => b.rms_norm(&x, &w.attn_norm, eps),
                Some(d) => b.add_rms_norm(&mut x, &d, &w.attn_norm, eps),
            };
            let a = match &w.attn {
                Attn::Latent(mla) => b.latent_attention(l, &h, mla, &self.rope),
                Attn::Heads {
                    qkv,
                    q_bias,
                    k_bias,
                    v_bias,
                    q_norm,
                    k_norm,
                } => {
                    let (q, k, v) = match qkv {
                        Proj::Fused(m) => b.qkv_rope(l, &h, m, shape, &self.rope),
                        Proj::Split(p) => {
                            let mut q = b.linear(&h, &p[0], q_bias.as_ref());
                            let mut k = b.linear(&h, &p[1], k_bias.as_ref());
                            let v = b.linear(&h, &p[2], v_bias.as_ref());
                            if let (Some(qn), Some(kn)) = (q_norm, k_norm) {
                                b.head_rms_norm(&mut q, shape.n_heads, qn, eps);
                                b.head_rms_norm(&mut k, shape.n_kv_heads, kn, eps);
                            }
                            b.rope(&mut q, shape.n_heads, c.head_dim, &self.rope);
                            b.rope(&mut k, shape.n_kv_heads, c.head_dim, &self.rope);
                            (q, k, v)
                        }
                    };
                    b.next_input_for(&w.o);
                    b.attention(l, &q, &k, &v, shape)
                }
            };
            let mut o = b.linear(&a, &w.o, None);
            if sharded {
                b.all_reduce_sum(&mut o);
            }
            let mut d = match &w.ffn {
                Ffn::Dense { gate_up, down } => {
                    b.next_input_for(gate_up.first());
                    let h = b.add_rms_norm(&mut x, &o, &w.ffn_norm, eps);
                    b.next_input_for(down);
                    let m = match gate_up {
                        Proj::Fused(gu) => b.gate_up_silu(&h, gu),
                        Proj::Split(p) => {
                            let g = b.linear(&h, &p[0], None);
                            let u = b.linear(&h, &p[1], None);
                            b.silu_mul(&g, &u)
                        }
                    };
                    b.linear(&m, down, None)
                }
                Ffn::Moe(moe) => {
                    let h = b.add_rms_norm(&mut x, &o, &w.ffn_norm, eps);
                    b.moe_ffn(&h, moe)
                }
            };
            if sharded {
                b.all_reduce_sum(&mut d);
            }
            pending = Some(d);
        }
        if let Some(d) = pending {
            b.add_assign(&mut x, &d);
        }
        let x = b.gather_logit_rows(&x);
        let x = b.rms_norm(&x, &self.norm, eps);
        b.linear(&x, self.lm_head.as_ref().unwrap_or(&self.embed), None)
    }

    /// [`Self::compute`] with each RMSNorm inside the projection that reads it and each
    /// residual add inside the projection whose output it adds (one rank, stacked
    /// projections): per layer q|k|v (norm, RoPE, K/V store), attention, o (+= x),
    /// gate|up (norm, SiLU·mul), down (+= x). The same values as `compute` by the trait's
    /// default compositions; the CUDA gemv kernels give the same bits in fewer launches.
    fn compute_norm_in_linear(&mut self) -> B::Tensor {
        let shape = self.attn_shape();
        let b = &mut self.backend;
        let c = &self.cfg;
        let eps = c.rms_norm_eps;
        let mut x = b.embed(&self.embed);
        for (l, w) in self.layers.iter().enumerate() {
            let (
                Attn::Heads {
                    qkv: Proj::Fused(qkv),
                    ..
                },
                Ffn::Dense {
                    gate_up: Proj::Fused(gate_up),
                    down,
                },
            ) = (&w.attn, &w.ffn)
            else {
                unreachable!("takes_norm_in_linear_flow checked every layer's projections")
            };
            let (q, k, v) = b.rms_norm_qkv_rope(l, &x, &w.attn_norm, eps, qkv, shape, &self.rope);
            b.next_input_for(&w.o);
            let a = b.attention(l, &q, &k, &v, shape);
            b.linear_add_residual(&mut x, &a, &w.o);
            b.next_input_for(down);
            let m = b.rms_norm_gate_up_silu(&x, &w.ffn_norm, eps, gate_up);
            b.linear_add_residual(&mut x, &m, down);
        }
        let x = b.gather_logit_rows(&x);
        let x = b.rms_norm(&x, &self.norm, eps);
        b.linear(&x, self.lm_head.as_ref().unwrap_or(&self.embed), None)
    }
}

impl<B: Backend> LlamaRunner<B> {
    /// Stages the step and produces its logits tensor: replayed from a captured graph
    /// when the backend has one for this shape, otherwise by running the ops (captured
    /// first when the backend asks for it, eagerly again if the capture fails).
    fn step_logits(&mut self, step: &StepInput) -> Result<B::Tensor> {
        self.backend.begin_step(step)?;
        if let Some(t) = self.backend.replay()? {
            self.last_graph = StepGraph::Replayed;
            return Ok(t);
        }
        self.last_graph = StepGraph::Eager;
        // A backend may capture the step more than once (variants of one shape it times
        // and chooses between: `Backend::capture_again`); its `replay` is then the output.
        let mut captures = 0;
        loop {
            let capturing = self.backend.begin_capture();
            let logits = self.compute();
            if !capturing {
                return Ok(logits);
            }
            if !self.backend.end_capture(&logits) {
                drop(logits);
                return Ok(self.compute());
            }
            captures += 1;
            self.last_graph = StepGraph::Captured;
            let again = self.backend.capture_again();
            if !again && captures == 1 {
                return Ok(logits);
            }
            drop(logits);
            if !again {
                return self.backend.replay()?.ok_or_else(|| {
                    anyhow::anyhow!("no graph kept after timing the captured variants")
                });
            }
        }
    }

    /// Greedy next-token ids of the step's logit rows; the argmax runs on the device
    /// when the backend can, so only the ids are copied back.
    pub fn forward_greedy(&mut self, step: &StepInput) -> Result<Vec<u32>> {
        self.ensure_whole()?;
        let logits = self.step_logits(step)?;
        let ids = match self.backend.argmax_rows(&logits) {
            Some(ids) => ids,
            None => {
                let v = self.cfg.vocab_size;
                let data = self.backend.to_host(&logits);
                data.chunks(v.max(1)).map(host_argmax).collect()
            }
        };
        drop(logits);
        self.backend.finish_step()?;
        Ok(ids)
    }

    /// Greedy ids under structured output: the step is enqueued first, then `masks` is
    /// called (the grammar masks are computed while the device runs the step), and the
    /// masked argmax runs on the device when the backend can, else on the host copy of the
    /// logits.
    pub fn forward_greedy_masked(
        &mut self,
        step: &StepInput,
        masks: &mut dyn FnMut() -> Result<RowMasks>,
    ) -> Result<Vec<u32>> {
        self.ensure_whole()?;
        let logits = self.step_logits(step)?;
        let masks = match masks() {
            Ok(m) => m,
            Err(e) => {
                drop(logits);
                self.backend.finish_step()?;
                return Err(e);
            }
        };
        let ids = match self.backend.argmax_rows_masked(&logits, &masks) {
            Some(ids) => ids,
            None => {
                let v = self.cfg.vocab_size;
                let data = self.backend.to_host(&logits);
                data.chunks(v.max(1))
                    .enumerate()
                    .map(|(r, row)| masks.argmax(r, row))
                    .collect()
            }
        };
        drop(logits);
        self.backend.finish_step()?;
        Ok(ids)
    }

    pub fn backend(&self) -> &B {
        &self.backend
    }

    /// What this runner holds of the model.
    pub fn shard(&self) -> &RankShard {
        &self.shard
    }

    /// A rank's logits are its vocabulary slice: only [`ShardRunner`] may run it.
    fn ensure_whole(&self) -> Result<()> {
        ensure!(
            self.shard.ranks == 1,
            "rank {} of a tensor-parallel model runs only under a tensor-parallel runner",
            self.shard.rank
        );
        Ok(())
    }

    pub fn backend_mut(&mut self) -> &mut B {
        &mut self.backend
    }
}

/// First index of the largest value; NaN never wins (the engine's `argmax` rule).
fn host_argmax(row: &[f32]) -> u32 {
    let (mut best, mut best_v) = (0, f32::NEG_INFINITY);
    for (i, &x) in row.iter().enumerate() {
        if x > best_v {
            (best, best_v) = (i, x);
        }
    }
    best as u32
}

impl<B: Backend> ModelRunner for LlamaRunner<B> {
    fn forward(&mut self, step: &StepInput) -> Result<Logits> {
        self.ensure_whole()?;
        let logits = self.step_logits(step)?;
        let data = self.backend.to_host(&logits);
        drop(logits);
        self.backend.finish_step()?;
        Ok(Logits {
            rows: step.logit_rows.len(),
            vocab: self.cfg.vocab_size,
            data,
        })
    }

    fn forward_greedy(&mut self, step: &StepInput) -> Result<Option<Vec<u32>>> {
        LlamaRunner::forward_greedy(self, step).map(Some)
    }

    fn forward_greedy_masked(
        &mut self,
        step: &StepInput,
        masks: &mut dyn FnMut() -> Result<RowMasks>,
    ) -> Result<Option<Vec<u32>>> {
        LlamaRunner::forward_greedy_masked(self, step, masks).map(Some)
    }

    fn renew_kv(&mut self) -> Result<()> {
        self.backend.renew_kv()
    }

    fn block_size(&self) -> usize {
        self.kv.block_size
    }
    fn num_blocks(&self) -> usize {
        self.kv.num_blocks
    }
    fn vocab_size(&self) -> usize {
        self.cfg.vocab_size
    }
    fn device_name(&self) -> String {
        self.backend.name()
    }
    fn captured_query_lens(&self) -> Option<Vec<usize>> {
        self.backend.captured_query_lens()
    }
    fn warm_up_steps(
        &self,
        query_lens: &[usize],
        max_seqs: usize,
        max_tokens: usize,
    ) -> Vec<crate::runner::WarmUpStep> {
        self.backend.warm_up_steps(query_lens, max_seqs, max_tokens)
    }
    fn last_step_graph(&self) -> Option<StepGraph> {
        self.backend
            .captured_query_lens()
            .is_some()
            .then_some(self.last_graph)
    }
}

/// (largest value, its index): the first maximum, NaN never wins ([`host_argmax`]).
fn host_max(row: &[f32]) -> (f32, u32) {
    let i = host_argmax(row);
    (row.get(i as usize).copied().unwrap_or(f32::NEG_INFINITY), i)
}

impl<B: Backend> ShardRunner for LlamaRunner<B> {
    fn shard(&self) -> &RankShard {
        &self.shard
    }

    fn forward_local_max(&mut self, step: &StepInput) -> Result<Vec<(f32, u32)>> {
        let logits = self.step_logits(step)?;
        let mut pairs = match self.backend.max_rows(&logits) {
            Some(p) => p,
            None => {
                let v = self.shard.vocab.len();
                let data = self.backend.to_host(&logits);
                data.chunks(v.max(1)).map(host_max).collect()
            }
        };
        drop(logits);
        self.backend.finish_step()?;
        let first = self.shard.vocab.start as u32;
        pairs.iter_mut().for_each(|p| p.1 += first);
        Ok(pairs)
    }

    fn forward_local_logits(&mut self, step: &StepInput) -> Result<Vec<f32>> {
        let logits = self.step_logits(step)?;
        let data = self.backend.to_host(&logits);
        drop(logits);
        self.backend.finish_step()?;
        Ok(data)
    }

    fn block_size(&self) -> usize {
        self.kv.block_size
    }
    fn num_blocks(&self) -> usize {
        self.kv.num_blocks
    }
    fn device_name(&self) -> String {
        self.backend.name()
    }
    fn captured_query_lens(&self) -> Option<Vec<usize>> {
        self.backend.captured_query_lens()
    }
}
