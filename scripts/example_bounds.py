"""Print the optimal acceptance rate α* of the built-in example steps, by design and n.

This is the main job until ``scripts/compute_bounds.py`` reads dumped logits.
"""

from otbound.examples import main

if __name__ == "__main__":
    main()
