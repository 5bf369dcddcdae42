"""bridge: gather/fuse shared by PDMM and attention, unrolled PDMM, comparisons (issue: bridge)."""
