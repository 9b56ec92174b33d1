// Streaming read bandwidth of a machine on 1 and 2 threads (AVX2 sum over
// 256 MiB, 10 passes). `rustc -O -C target-cpu=native scripts/cpu_read_bandwidth.rs -o /tmp/bw && /tmp/bw`:
// 2 cores of an AMD EPYC: 18.6 / 18.0 GB/s on one thread, 24.2 / 27.5 on two (two runs).
use std::time::Instant;
#[target_feature(enable="avx2")]
unsafe fn sum(a: &[u8]) -> u64 {
    use std::arch::x86_64::*;
    let mut acc = _mm256_setzero_si256();
    let mut acc2 = _mm256_setzero_si256();
    let p = a.as_ptr();
    let mut i = 0;
    while i + 64 <= a.len() {
        let v = _mm256_loadu_si256(p.add(i) as *const __m256i);
        let w = _mm256_loadu_si256(p.add(i+32) as *const __m256i);
        acc = _mm256_add_epi64(acc, _mm256_sad_epu8(v, _mm256_setzero_si256()));
        acc2 = _mm256_add_epi64(acc2, _mm256_sad_epu8(w, _mm256_setzero_si256()));
        i += 64;
    }
    let mut out = [0u64;4];
    _mm256_storeu_si256(out.as_mut_ptr() as *mut __m256i, _mm256_add_epi64(acc,acc2));
    out.iter().sum()
}
fn main() {
    let n = 256usize << 20;
    let a: Vec<u8> = (0..n).map(|i| (i * 7 % 251) as u8).collect();
    for threads in [1usize, 2] {
        let t0 = Instant::now();
        let reps = 10;
        let mut tot = 0u64;
        for _ in 0..reps {
            let chunk = n / threads;
            tot += std::thread::scope(|s| {
                let hs: Vec<_> = (0..threads).map(|t| { let a = &a[t*chunk..(t+1)*chunk]; s.spawn(move || unsafe { sum(a) }) }).collect();
                hs.into_iter().map(|h| h.join().unwrap()).sum::<u64>()
            });
        }
        let dt = t0.elapsed().as_secs_f64();
        println!("threads {threads}: {:.1} GB/s ({tot})", (n * reps) as f64 / dt / 1e9);
    }
}
