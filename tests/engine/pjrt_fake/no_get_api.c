/* A shared object that is not a PJRT plugin: it loads, but has no GetPjrtApi. */
int mtf_not_a_pjrt_plugin(void);
int mtf_not_a_pjrt_plugin(void) { return 1; }
