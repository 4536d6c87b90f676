#!/bin/bash
# prepares data only; no verl launch command here
set -e
python3 examples/data_preprocess/gsm8k.py --local_dir "$HOME/data/gsm8k"
echo "python -m verl.trainer.main_ppo is run by another script"
