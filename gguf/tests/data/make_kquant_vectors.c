// Build (ggml checkout at d99724f2b141, x86-64, no -march so no FMA contraction):
//   gcc -O2 -I ggml/include -I ggml/src -c ggml/src/ggml-quants.c
//   gcc -O2 -I ggml/include -I ggml/src make_kquant_vectors.c ggml-quants.o stubs.o -lm
// where stubs.o defines ggml_abort, ggml_row_size, ggml_type_name, ggml_type_size (unused here).
// Output: kquant_ref.json.
// Fixture generator: ggml's reference K-quant quantizers on deterministic inputs.
#include <stdio.h>
#include <stdint.h>
#include <string.h>
#include <stdlib.h>
#include <math.h>
#include "ggml-quants.h"
#include "ggml-common.h"
static uint64_t s = 0x9E3779B97F4A7C15ull;
static double urand(void){ s ^= s<<13; s ^= s>>7; s ^= s<<17; return (double)(s>>11)/(double)(1ull<<53);}
static void hexout(const void*p,size_t n){const uint8_t*b=p;for(size_t i=0;i<n;i++)printf("%02x",b[i]);}
int main(void){
  const int rows=8, row_len=512; static float x[8*512];
  for(int r=0;r<rows;r++) for(int i=0;i<row_len;i++){
    double g = 0; for(int k=0;k<4;k++) g+=urand(); g=(g-2.0)*1.7; // ~normal
    float v=(float)(g*0.05*(1+r));
    if(r==1 && i%37==0) v*=12.0f;               // outliers
    if(r==2) v = fabsf(v);                       // all non-negative (min clamps to 0)
    if(r==3) v = -fabsf(v) - 0.01f;              // all negative
    if(r==4 && i<256) v = 0.0f;                  // an all-zero super-block
    if(r==5 && i>=256) v = 0.125f;               // a constant super-block
    if(r==6) v *= 1e-3f;                         // small magnitudes
    x[r*row_len+i]=v;
  }
  printf("{\"generator\":\"ggml/src/ggml-quants.c quantize_row_q{4,5,6}_K_ref from github.com/ggml-org/ggml d99724f2b141 (2026-08-21), gcc -O2, x86-64 baseline (no FMA contraction), harness in importer/gguf/tests/data/make_kquant_vectors.c\",");
  printf("\"rows\":%d,\"row_len\":%d,\"input_f32_hex\":\"",rows,row_len); hexout(x,sizeof x); printf("\",\"blocks\":{");
  int n=rows*row_len/QK_K;
  block_q4_K *a=calloc(n,sizeof *a); quantize_row_q4_K_ref(x,a,rows*row_len); printf("\"Q4_K\":\""); hexout(a,n*sizeof *a); printf("\",");
  block_q5_K *b=calloc(n,sizeof *b); quantize_row_q5_K_ref(x,b,rows*row_len); printf("\"Q5_K\":\""); hexout(b,n*sizeof *b); printf("\",");
  block_q6_K *c=calloc(n,sizeof *c); quantize_row_q6_K_ref(x,c,rows*row_len); printf("\"Q6_K\":\""); hexout(c,n*sizeof *c); printf("\"}}\n");
  return 0;
}
