cd benchmarks/data
nvidia-smi --query-gpu=name,power.limit --format=csv,noheader
timeout 200 python3 record_examples.py ../../examples $OUT/ex --models resnet_dp,mlp_dp --no-traces --host-counters > $OUT/ex.log 2>&1; echo rc=$?
timeout 250 python3 record_examples.py ../models/heldout $OUT/ho --models vit_b16,bert_base --no-traces --host-counters > $OUT/ho.log 2>&1; echo rc=$?
grep -h "^[a-z_0-9]* {" $OUT/ex.log $OUT/ho.log | cut -c1-400
cd $OUT && tar czf all.tgz ex ho *.log && rm -rf ex ho
