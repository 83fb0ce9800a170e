from components.program import main

main()
