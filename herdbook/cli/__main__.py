from herdbook.cli.entry import main

main()
