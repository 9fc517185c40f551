from extractor.cli import main

main()
