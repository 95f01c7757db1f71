"""`torchrun ... -m carla_wds.train --config tiny`: the trainer's entry point."""
from .loop import main

if __name__ == "__main__":
    main()
