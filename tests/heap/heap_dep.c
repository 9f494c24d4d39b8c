/* A library that links libshaddr-heap and is preloaded (as the interposer would be). */
int shaddr_heap_dep_marker(void) { return 1; }
