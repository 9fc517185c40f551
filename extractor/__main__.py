from extractor.cli import main

if __name__ == "__main__":  # a worker process (spawn) imports this module too
    main()
